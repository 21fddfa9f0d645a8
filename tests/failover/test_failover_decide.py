"""The client's rules and the choice of the replica, as pure functions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from baton.failover.decide import (
    Answer,
    ClientReport,
    ClientState,
    RoundOutlook,
    ServerInfo,
    Token,
    believed_master,
    choose_replica,
    first_master,
    on_hold,
    on_invalidate,
    on_ping,
    on_reconfigure,
    round_outlook,
)
from baton.store.master_file import Address

M, R1, R2 = Address("h", 1), Address("h", 2), Address("h", 3)


def test_a_round_goes_ping_invalidate_reconfigure_and_refuses_older_rounds() -> None:
    t1, t2 = Token(1, "s1"), Token(1, "s2")
    assert t1 < t2 < Token(2, "s1")
    d = on_ping(ClientState(), t2, old_answers=False)
    assert d.answer == Answer.PONG
    assert on_ping(d.state, t1, old_answers=False).answer == Answer.STALE
    assert on_invalidate(d.state, t1, old_answers=False).answer == Answer.STALE
    refused = on_invalidate(d.state, t2, old_answers=True)
    assert refused.answer == Answer.REFUSED and not refused.write
    d = on_invalidate(d.state, t2, old_answers=False)
    assert d.answer == Answer.INVALIDATED and d.write and d.master is None
    assert on_reconfigure(d.state, t1, R1, None).answer == Answer.STALE
    assert on_reconfigure(d.state, Token(3, "s1"), R1, None).answer == Answer.REFUSED
    d = on_reconfigure(d.state, t2, R2, None)
    assert d.answer == Answer.RECONFIGURED and d.write and d.master == R2
    # Periodic reconfigure: a no-op for the same master, a conflict for another one.
    same = on_reconfigure(d.state, t2, R2, R2)
    assert same.answer == Answer.RECONFIGURED and not same.write
    assert on_reconfigure(d.state, t2, R1, R2).answer == Answer.CONFLICT


def test_the_master_answering_from_a_client_holds_the_round_back() -> None:
    d = on_ping(ClientState(), Token(1, "s"), old_answers=True)
    assert d.answer == Answer.REFUSED
    assert on_invalidate(d.state, Token(1, "s"), old_answers=False).answer == Answer.REFUSED


messages = st.lists(
    st.tuples(
        st.sampled_from(["ping", "invalidate", "reconfigure"]),
        st.builds(Token, st.integers(1, 3), st.sampled_from(["s1", "s2"])),
        st.sampled_from([R1, R2]),
    ),
    max_size=30,
)


@given(messages)
def test_a_client_only_ever_writes_a_master_for_the_round_it_invalidated_in(
    msgs: list[tuple[str, Token, Address]],
) -> None:
    """Whatever order messages of several servers arrive in, the file changes from empty to a
    master only by the reconfigure of the round the client invalidated in (or for a newcomer
    whose file is empty and who is in no round), and never from one master to another."""
    state = ClientState()
    current: Address | None = M
    for kind, token, master in msgs:
        if kind == "ping":
            d = on_ping(state, token, old_answers=False)
        elif kind == "invalidate":
            d = on_invalidate(state, token, old_answers=False)
        else:
            d = on_reconfigure(state, token, master, current)
        if d.write and d.master is not None:
            assert current is None or current == d.master
            if state.invalidated_in is not None:
                # Only its own round's reconfigure, even after a newer round pinged it: that
                # round must then ping again before it can invalidate here.
                assert token == state.invalidated_in
                assert d.state.pinged_in is None
            else:
                assert state.highest is None or token >= state.highest
        if d.write:
            current = d.master
        state = d.state


def test_the_newest_line_of_masters_and_then_the_offset_wins() -> None:
    old = ServerInfo(M, reachable=False)
    stuck = ServerInfo(R1, True, "slave", offset=900, master_of=M, token=Token(1, "s"))
    promoted = ServerInfo(R2, True, "master", offset=500, token=Token(2, "s"))
    assert choose_replica([old, stuck, promoted], M) == promoted
    assert choose_replica([old, stuck], M) == stuck
    assert choose_replica([old], M) is None
    back = ServerInfo(M, True, "master", offset=950, token=Token(1, "s"))
    assert first_master([back, stuck, promoted], []) == R2  # the newest line of masters


def test_a_server_empty_and_never_synced_is_never_promoted() -> None:
    """Defect 17 (fault campaign, run M6): a replica restarted empty, made a replica just
    before its master died, never got the sync's first byte; promoting it lost the store."""
    old = ServerInfo(M, reachable=False)
    fresh = ServerInfo(R1, True, "slave", offset=0, master_of=M, keys=0, synced=False)
    restarted = ServerInfo(R2, True, "master", offset=0, keys=0)  # back empty, not yet a replica
    assert fresh.holds_nothing and restarted.holds_nothing
    assert choose_replica([old, fresh, restarted], M) is None
    # Synced once (the master's data was empty), or holding keys (restarted from its own
    # disk): either may be promoted.
    synced = ServerInfo(R1, True, "slave", offset=0, master_of=M, keys=0, synced=True)
    from_disk = ServerInfo(R2, True, "slave", offset=0, master_of=M, keys=12, synced=False)
    assert choose_replica([old, synced], M) == synced
    assert choose_replica([old, from_disk, fresh], M) == from_disk


def test_a_round_that_pinged_and_was_held_back_does_not_make_the_master_stale() -> None:
    """Issue 27, second variant: a losing server's retry round was refused at ping, and every
    periodic reconfigure was answered "stale" from then on. The master a client has, named by
    the round that gave it to it, stays accepted; an older round's is stale."""
    t1, t2, t3 = Token(1, "s1"), Token(2, "s2"), Token(3, "s1")
    state = on_ping(ClientState(), t1, old_answers=False).state
    state = on_invalidate(state, t1, old_answers=False).state
    state = on_reconfigure(state, t1, R1, None).state
    assert (state.confirmed, state.confirmed_master) == (t1, R1)
    state = on_reconfigure(state, t2, R1, R1).state  # a periodic one confirms t2
    assert state.confirmed == t2
    refused = on_ping(state, t3, old_answers=True)  # held back: the master answers here
    assert refused.answer == Answer.REFUSED and refused.state.highest == t3
    again = on_reconfigure(refused.state, t2, R1, R1)
    assert again.answer == Answer.RECONFIGURED and not again.write
    assert on_reconfigure(refused.state, t1, R1, R1).answer == Answer.STALE
    # An empty file (a client that found its master a replica) takes only the newest round.
    assert on_reconfigure(refused.state, t2, R2, None).answer == Answer.STALE


def test_the_current_master_is_the_newest_confirmed_round_s_never_a_token_on_a_server() -> None:
    def report(
        confirmed: Token | None, master: Address | None, file: Address | None
    ) -> ClientReport:
        return ClientReport(ClientState(confirmed=confirmed, confirmed_master=master), file)

    t1, t2 = Token(1, "s1"), Token(2, "s2")
    # A client emptied by a later round keeps the master its round named.
    reports = [report(t1, M, M), report(t2, R1, R1), report(t2, R1, None)]
    assert believed_master(reports) == (R1, t2)
    assert believed_master([report(None, None, M)]) is None
    # Before any round: the files' master, even dead and even beside a server that came back
    # empty saying it is a master (it has the newest token of none).
    back_empty = ServerInfo(R2, True, "master", keys=0)
    dead = ServerInfo(M, reachable=False)
    assert first_master([dead, back_empty], [report(None, None, M)]) == M
    assert first_master([dead, back_empty], [report(None, None, None)]) == R2


def test_a_round_is_taken_over_only_once_every_waiting_client_has_heard_nothing_for_long() -> None:
    t1, t2 = Token(1, "s1"), Token(2, "s2")
    waiting = ClientState(highest=t2, pinged_in=t2, invalidated_in=t2, confirmed=t1)
    done = ClientState(highest=t1, confirmed=t1, confirmed_master=M)
    assert round_outlook([ClientReport(done, M)], t1, 1.0) is RoundOutlook.NONE
    fresh, quiet = ClientReport(waiting, None, 0.2), ClientReport(waiting, None, 1.5)
    assert round_outlook([quiet, fresh], t1, 1.0) is RoundOutlook.UNDER_WAY
    assert round_outlook([quiet, quiet], t1, 1.0) is RoundOutlook.ABANDONED
    # Waiting for a round no newer than the current master's: its reconfigure was lost.
    assert round_outlook([fresh], t2, 1.0) is RoundOutlook.ABANDONED
    assert on_hold(waiting, t2).answer == Answer.HELD
    assert on_hold(waiting, t1).answer == Answer.STALE


def test_a_round_that_pinged_a_waiting_client_must_ping_again_after_its_reconfigure() -> None:
    """A client invalidated in round s1 answers a newer round's ping (s2's, say, taking over a
    round it thought dead), then s1's reconfigure arrives: it is applied (the client's master
    moves only by the round it invalidated in), and s2's invalidate is refused, so s2 cannot
    empty a file whose round it did not see through."""
    t1, t2 = Token(2, "s1"), Token(2, "s2")
    state = on_invalidate(on_ping(ClientState(), t1, False).state, t1, False).state
    state = on_ping(state, t2, old_answers=False).state
    d = on_reconfigure(state, t1, R1, None)
    assert d.answer == Answer.RECONFIGURED and d.write and d.master == R1
    assert (d.state.pinged_in, d.state.confirmed) == (None, t1)
    assert on_invalidate(d.state, t2, old_answers=False).answer == Answer.REFUSED
