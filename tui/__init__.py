"""The live Textual dashboard (``sofa_top.tui``).

``sofa_top.tui.app.run_dashboard(source)`` runs it on any ``SnapshotSource``; the app only ever
receives ``Snapshot`` objects, as messages posted from the source's thread. Keep imports here
cheap: the dashboard must start in well under 2 s, so no ML framework is ever imported.
"""
