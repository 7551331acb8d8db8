from tests.agents.test_hot_path import *  # noqa
def test_dbg(alice, demo):
    journal = claimed(alice, demo)
    [step] = journal.append([tool_step(2, StepStatus.RUNNING)])
    with CaptureQueriesContext(connection) as queries:
        journal.update(step.copy(status=StepStatus.SUCCEEDED, result=2))
    print("SQL", connection.vendor, [q["sql"][:30] for q in queries.captured_queries])
