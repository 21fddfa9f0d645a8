"""Running a command only while holding leadership (``baton elect``).

:mod:`baton.elect.supervisor` campaigns and renews, and starts :mod:`baton.elect.guard`, the
small separate process that runs COMMAND and stops it at the renew deadline whatever happens
to the supervisor. The CLI (:mod:`baton.cli.elect`) only parses, handles signals and prints.
"""
