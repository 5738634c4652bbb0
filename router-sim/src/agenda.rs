//! The event queue: what happens next, in time order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Events ordered by time; events at the same millisecond come out in the order they were put
/// in, so a run never depends on how the heap breaks ties.
///
/// The heap holds only `(time, sequence, slot)`; the events wait in a slab, so that sifting moves
/// 24 bytes, not whole events (thousands of requests may be waiting at once under overload).
#[derive(Debug)]
pub(crate) struct Agenda<E> {
    heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    slab: Vec<Option<E>>,
    free: Vec<usize>,
    seq: u64,
}

impl<E> Agenda<E> {
    pub(crate) fn new() -> Self {
        Self {
            heap: BinaryHeap::new(),
            slab: Vec::new(),
            free: Vec::new(),
            seq: 0,
        }
    }

    /// Schedules `event` at `at` ms.
    pub(crate) fn push(&mut self, at: u64, event: E) {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.slab[slot] = Some(event);
                slot
            }
            None => {
                self.slab.push(Some(event));
                self.slab.len() - 1
            }
        };
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, slot)));
    }

    /// The earliest event and its time.
    pub(crate) fn pop(&mut self) -> Option<(u64, E)> {
        loop {
            let Reverse((at, _, slot)) = self.heap.pop()?;
            self.free.push(slot);
            // Every slot in the heap holds an event; skip rather than panic if one did not.
            if let Some(event) = self.slab.get_mut(slot).and_then(Option::take) {
                return Some((at, event));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_come_out_by_time_then_in_the_order_they_went_in() {
        let mut agenda = Agenda::new();
        for (at, name) in [(5, "a"), (1, "b"), (5, "c"), (3, "d"), (1, "e")] {
            agenda.push(at, name);
        }
        let order: Vec<_> = std::iter::from_fn(|| agenda.pop()).collect();
        assert_eq!(order, [(1, "b"), (1, "e"), (3, "d"), (5, "a"), (5, "c")]);
        agenda.push(9, "f");
        assert_eq!(agenda.pop(), Some((9, "f")));
        assert_eq!(agenda.slab.len(), 5, "slots are reused");
    }
}
