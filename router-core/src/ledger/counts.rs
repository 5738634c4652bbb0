//! Quantities counted per limit dimension: requests, tokens, input and output tokens.

use std::ops::{Index, IndexMut};

use super::window::Dim;

/// One value per counted dimension.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct PerDim<T> {
    /// Requests (RPM).
    pub(crate) requests: T,
    /// Tokens, input plus output (TPM).
    pub(crate) tokens: T,
    /// Input (prompt) tokens (ITPM).
    pub(crate) input: T,
    /// Output (completion) tokens (OTPM).
    pub(crate) output: T,
}

/// What is counted: requests and tokens.
pub(crate) type Counts = PerDim<u64>;

/// A change to what is counted (a block's correction, a move between seconds).
pub(crate) type Deltas = PerDim<i64>;

impl<T> PerDim<T> {
    pub(crate) const fn new(requests: T, tokens: T, input: T, output: T) -> Self {
        Self {
            requests,
            tokens,
            input,
            output,
        }
    }
}

impl<T: Copy> PerDim<T> {
    /// In [`Dim`] order: requests, tokens, input, output (the order the Lua scripts use).
    pub(crate) fn array(self) -> [T; 4] {
        [self.requests, self.tokens, self.input, self.output]
    }

    pub(crate) fn map<U>(self, mut f: impl FnMut(T) -> U) -> PerDim<U> {
        PerDim::new(
            f(self.requests),
            f(self.tokens),
            f(self.input),
            f(self.output),
        )
    }

    /// `f` of each dimension's pair.
    pub(crate) fn zip<U, V>(self, other: PerDim<U>, mut f: impl FnMut(T, U) -> V) -> PerDim<V> {
        PerDim::new(
            f(self.requests, other.requests),
            f(self.tokens, other.tokens),
            f(self.input, other.input),
            f(self.output, other.output),
        )
    }
}

impl<T: Copy> From<[T; 4]> for PerDim<T> {
    fn from([requests, tokens, input, output]: [T; 4]) -> Self {
        Self::new(requests, tokens, input, output)
    }
}

/// Equal to the same values in [`Dim`] order.
impl<T: PartialEq> PartialEq<[T; 4]> for PerDim<T> {
    fn eq(&self, [requests, tokens, input, output]: &[T; 4]) -> bool {
        self.requests == *requests
            && self.tokens == *tokens
            && self.input == *input
            && self.output == *output
    }
}

impl<T: Copy> IntoIterator for PerDim<T> {
    type Item = T;
    type IntoIter = std::array::IntoIter<T, 4>;

    /// In [`Dim`] order (see [`PerDim::array`]).
    fn into_iter(self) -> Self::IntoIter {
        self.array().into_iter()
    }
}

impl<T: Copy> IntoIterator for &PerDim<T> {
    type Item = T;
    type IntoIter = std::array::IntoIter<T, 4>;

    fn into_iter(self) -> Self::IntoIter {
        self.array().into_iter()
    }
}

impl<T> Index<Dim> for PerDim<T> {
    type Output = T;

    fn index(&self, dim: Dim) -> &T {
        match dim {
            Dim::Requests => &self.requests,
            Dim::Tokens => &self.tokens,
            Dim::Input => &self.input,
            Dim::Output => &self.output,
        }
    }
}

impl<T> IndexMut<Dim> for PerDim<T> {
    fn index_mut(&mut self, dim: Dim) -> &mut T {
        match dim {
            Dim::Requests => &mut self.requests,
            Dim::Tokens => &mut self.tokens,
            Dim::Input => &mut self.input,
            Dim::Output => &mut self.output,
        }
    }
}

impl Counts {
    pub(crate) const ZERO: Counts = Counts::new(0, 0, 0, 0);

    /// One request of `tokens`, `input` of them its prompt's.
    pub(crate) fn request(tokens: u64, input: u64) -> Self {
        Self::new(1, tokens, input, tokens.saturating_sub(input))
    }

    /// Each dimension added, saturating.
    pub(crate) fn plus(self, other: Counts) -> Counts {
        self.zip(other, u64::saturating_add)
    }

    /// Each dimension less `other`'s, down to zero.
    pub(crate) fn less(self, other: Counts) -> Counts {
        self.zip(other, u64::saturating_sub)
    }
}

impl Deltas {
    pub(crate) const ZERO: Deltas = Deltas::new(0, 0, 0, 0);
}
