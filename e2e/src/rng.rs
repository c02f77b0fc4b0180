//! Seeded randomness for workloads on a live server: the same seed gives
//! the same workload on every run, so a failure can be replayed. The
//! generator is proptest's (ChaCha). Pure properties that need no server
//! are proptest tests with shrinking; a workload against a cluster cannot
//! be shrunk (every attempt would need a new slot and a new run), so it
//! draws from this.

use proptest::prelude::{Rng, RngExt};
use proptest::test_runner::{RngAlgorithm, TestRng};

pub struct SeededRng(TestRng);

impl SeededRng {
    pub fn new(seed: u64) -> SeededRng {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        SeededRng(TestRng::from_seed(RngAlgorithm::ChaCha, &bytes))
    }

    /// Any `u64`.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0.random_range(0..n)
    }

    /// True `percent` times out of 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_sequence() {
        let draw = |seed| {
            let mut rng = SeededRng::new(seed);
            (0..16).map(|_| rng.below(1000)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        let mut rng = SeededRng::new(1);
        assert!((0..1000).all(|_| rng.below(3) < 3));
        assert!((0..1000).any(|_| rng.chance(50)) && (0..1000).any(|_| !rng.chance(50)));
    }
}
