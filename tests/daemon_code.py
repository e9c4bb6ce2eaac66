"""A module's code that leaves a daemon at import: a double fork and a session of its own,
so no process-group kill reaches it; the daemon writes its pid to ``$DAEMON_PID`` and
sleeps 120 s (tests of what a harness finds of it: test_untrusted, test_review_fork)."""

DAEMON = """
import os
import time

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(os.environ["DAEMON_PID"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
    os._exit(0)
os.wait()
"""
