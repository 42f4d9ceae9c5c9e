import sys

from .cli import quick

code = quick(sys.argv[1:])
if code is None:
    from .cli.main import main

    code = main()
sys.exit(code)
