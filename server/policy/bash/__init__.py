"""Reading ``bash`` command lines: the parse (tree-sitter-bash), the wrappers table and the paths
a command names.
"""
