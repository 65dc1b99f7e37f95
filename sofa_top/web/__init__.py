"""The dashboard and the home screen in a browser (``sofa-top serve``, ``launch --web``).

textual-serve runs one command per browser connection: a page is a process, and closing the
page ends it. So the page never owns what it shows. One **owner** process (``sofa-top serve``
or ``sofa-top launch --web``: ``owner.py``) starts each workload once, records it, and keeps it
running whatever pages come and go; each page's **viewer** process (``viewer.py``, the command
textual-serve runs) draws the owner's snapshots, which reach it over a private Unix socket
(``channel.py``), and asks the owner to open or stop a run. Closing a page ends only its viewer;
``q`` (confirmed) in any page, or Ctrl-C / SIGTERM / SIGHUP on the owner, stops the workload and
finalizes its session, exactly once. ``server.py`` is textual-serve behind a token.
"""
