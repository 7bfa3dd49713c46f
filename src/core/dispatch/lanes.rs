//! Which lane each operation of a call waits in.

use crate::core::domain::Priority;

/// The lane of each operation of a call: one for all, or one each (a `Batch` whose
/// items ask different priorities).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lanes {
    /// Every operation in this lane.
    All(Priority),
    /// Operation `i` in lane `i` (missing ones: normal).
    Each(Vec<Priority>),
}

impl From<Priority> for Lanes {
    fn from(lane: Priority) -> Self {
        Self::All(lane)
    }
}

impl Lanes {
    /// The lane of operation `i`.
    pub fn of(&self, i: usize) -> Priority {
        match self {
            Self::All(lane) => *lane,
            Self::Each(lanes) => lanes.get(i).copied().unwrap_or(Priority::Normal),
        }
    }

    /// The one lane of a call of `len` operations that leaves as one part of at most
    /// `max`; `None` when it leaves in several.
    pub fn one(&self, len: usize, max: usize) -> Option<Priority> {
        match self {
            Self::All(lane) if len <= max => Some(*lane),
            _ => None,
        }
    }

    /// `ops` (by their index in the call) grouped by lane, most urgent first; one group
    /// when they share a lane.
    pub fn split<T>(&self, ops: Vec<(usize, T)>) -> Vec<(Priority, Vec<(usize, T)>)> {
        if let Self::All(lane) = self {
            return vec![(*lane, ops)];
        }
        let mut groups: Vec<(Priority, Vec<(usize, T)>)> = Vec::new();
        for (i, op) in ops {
            let lane = self.of(i);
            match groups.iter_mut().find(|(l, _)| *l == lane) {
                Some((_, group)) => group.push((i, op)),
                None => groups.push((lane, vec![(i, op)])),
            }
        }
        groups.sort_by_key(|(lane, _)| std::cmp::Reverse(*lane));
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_split_by_lane_most_urgent_first_keeping_each_items_index() {
        let lanes = Lanes::Each(vec![Priority::Bulk, Priority::Urgent, Priority::Bulk]);
        let groups = lanes.split(vec![(0, 'a'), (1, 'b'), (2, 'c')]);
        assert_eq!(
            groups,
            vec![
                (Priority::Urgent, vec![(1, 'b')]),
                (Priority::Bulk, vec![(0, 'a'), (2, 'c')]),
            ]
        );
        assert_eq!(Lanes::from(Priority::Bulk).split(vec![(0, 'a')]).len(), 1);
    }
}
