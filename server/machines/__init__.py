"""One identity per remote machine: each machine has its own token, and its name comes from
that token, never from what the agent says about itself (``clientInfo``).

:mod:`.identity` is the pure part (names, digests, the lookup every request makes);
:mod:`.store` keeps the secrets (the OS keyring, or the config file when the keyring is
unusable) and the config records (a digest per machine, never the token).
"""
