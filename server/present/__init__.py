"""How agent text and bridge state are shown: the one safe renderer, previews, times, JSON views,
terminal text.
"""
