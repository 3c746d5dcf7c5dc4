"""Concurrent children share the machine's cores out, unless the user set a pool."""

from tff_radiomap.runtime import threads


def test_concurrent_children_share_the_cores_out_unless_the_user_set_a_pool(monkeypatch):
    for name in threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert threads.thread_limits(1, cores=2) == {}
    assert threads.thread_limits(2, cores=2) == {name: "1" for name in threads.THREAD_VARIABLES}
    assert threads.thread_limits(2, cores=8)["TF_NUM_INTRAOP_THREADS"] == "4"
    assert threads.thread_limits(3, cores=2)["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    assert "OPENBLAS_NUM_THREADS" not in threads.thread_limits(2, cores=2)


def test_the_default_share_is_of_the_cores_this_process_may_use(monkeypatch):
    for name in threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(threads, "available_cores", lambda: 6)
    assert threads.thread_limits(2)["TF_NUM_INTRAOP_THREADS"] == "3"
