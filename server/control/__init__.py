"""The local control API and approval page: the :class:`~server.api.BridgeApi` over loopback
HTTP, its checks and its client.
"""
