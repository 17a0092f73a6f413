"""Host-side trees of sandboxes: bounded walks (``hosttree``), content-addressed layers and snapshots
(``layers``) and workspace diffs (``workspace``). The lowest part of the sandbox room: it imports no
other part of it but the records in ``sandbox.base``.
"""
