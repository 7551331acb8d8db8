import cProfile, pstats, io, asyncio
import pytest
from tests.budget.test_step_budget import *  # noqa
from tests.budget.test_step_budget import (
    Run,
    succeeded,
    advance,
    script,
    configure,
    consumer_calls,
    worker_push_recorder,
)

pytestmark = [pytest.mark.django_db(transaction=True)]


def dump(p, name):
    s = io.StringIO()
    st = pstats.Stats(p, stream=s)
    st.sort_stats("cumulative").print_stats(90)
    s2 = io.StringIO()
    st = pstats.Stats(p, stream=s2)
    st.sort_stats("tottime").print_stats(40)
    open(f"/tmp/prof_{name}.txt", "w").write(s.getvalue() + s2.getvalue())


def test_prof(demo, model, flush_redis, counted_settings):
    import os

    if os.environ.get("CONF"):
        configure(demo)
    model(script(3))
    run = Run(demo)
    succeeded(advance(run.post(run.conversation())))
    c = run.conversation()
    p = cProfile.Profile()
    p.enable()
    tid = run.post(c)
    p.disable()
    dump(p, "web")
    pushed = []
    from unittest import mock

    with mock.patch("infra.push._Pusher.submit", worker_push_recorder(pushed)):
        p = cProfile.Profile()
        p.enable()
        advance(tid)
        p.disable()
        dump(p, "worker")
    task = succeeded(tid)
    asyncio.run(consumer_calls(task, pushed, html=True))
