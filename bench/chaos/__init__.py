"""``make chaos``: random faults at random moments, then the invariants.

Hundreds of runs (reads, ticket writes, e-mail writes, approvals) on the real
processes — Celery workers, beat, the web server, the bundled Redis, PostgreSQL or
SQLite — while a fault driver SIGKILLs workers, restarts Redis, restarts the web server
under connected websocket clients and terminates the app's database
connections. Afterwards every invariant is a count that must be zero: runs
settled, no write twice, no step lost or doubled, every websocket client saw
every change once and in order, the audit chain intact.

- ``plan``: what the seed decides (plans, the model, decisions, fault order);
- ``faults``: the product's processes and the fault driver;
- ``watch``: websocket clients that resume as the chat page does;
- ``drive``: the users and the operator, over the API;
- ``invariants`` / ``report``: the checks and what is printed;
- ``session`` / ``cli``: one session, and the command line.
"""
