use super::*;
use std::cell::Cell;
use std::sync::atomic::AtomicU64;

fn load(busy: u32) -> Load {
    Load::new(busy, 32)
}

#[test]
fn gates_refuse_in_order_and_spare_the_policy() {
    let p: Policy = "dynamic:window=2,c0=0".parse().unwrap();
    let cell = AtomicU64::new(p.initial_state().to_bits());
    let all = Gates { draining: true, app_down: true, at_capacity: true };
    assert_eq!(admit(&p, &cell, Try::Offer, all, load(0)), Verdict::Refuse(Reason::Draining));
    assert_eq!(admit(&p, &cell, Try::Offer, Gates { draining: false, ..all }, load(0)), Verdict::Refuse(Reason::AppDown));
    assert_eq!(admit(&p, &cell, Try::Offer, Gates { at_capacity: true, ..Gates::OPEN }, load(0)), Verdict::Refuse(Reason::Overload));
    // no gate asked the policy: its window has not moved
    assert_eq!(cell.read().unwrap().0, p.initial_state());
    assert_eq!(admit(&p, &cell, Try::Offer, Gates::OPEN, load(0)), Verdict::Refuse(Reason::Policy));
    assert_eq!(cell.read().unwrap().0.attempt, 1);
}

#[test]
fn finals_are_accepted_unless_at_capacity() {
    let p: Policy = "static:0".parse().unwrap();
    let cell = AtomicU64::new(p.initial_state().to_bits());
    let closed = Gates { draining: true, app_down: true, at_capacity: false };
    assert_eq!(admit(&p, &cell, Try::Final, closed, load(99)), Verdict::Accept);
    assert_eq!(admit(&p, &cell, Try::Final, Gates { at_capacity: true, ..closed }, load(0)), Verdict::Overloaded);
}

/// A cell that fails or conflicts on demand.
struct Flaky {
    state: Cell<State>,
    conflicts: Cell<usize>,
    fail: bool,
}

impl StateCell for Flaky {
    type Version = ();
    const MAX_CONFLICTS: usize = 8;
    fn read(&self) -> Option<(State, ())> {
        Some((self.state.get(), ()))
    }
    fn write(&self, state: State, _: ()) -> Write {
        if self.fail {
            return Write::Failed;
        }
        if self.conflicts.get() > 0 {
            self.conflicts.set(self.conflicts.get() - 1);
            return Write::Conflict;
        }
        self.state.set(state);
        Write::Done
    }
}

#[test]
fn when_unsure_never_refuse() {
    let p: Policy = "dynamic:c0=0".parse().unwrap();
    let s = p.initial_state();
    let failing = Flaky { state: Cell::new(s), conflicts: Cell::new(0), fail: true };
    assert_eq!(decide_in(&p, &failing, Try::Offer, load(5)), Decision::Accept);
    let contended = Flaky { state: Cell::new(s), conflicts: Cell::new(Flaky::MAX_CONFLICTS), fail: false };
    assert_eq!(decide_in(&p, &contended, Try::Offer, load(5)), Decision::Accept);
    // a few conflicts are retried, and the decision is the policy's
    let brief = Flaky { state: Cell::new(s), conflicts: Cell::new(3), fail: false };
    assert_eq!(decide_in(&p, &brief, Try::Offer, load(5)), Decision::Refuse);
    assert_eq!(brief.state.get().attempt, 1);
}
