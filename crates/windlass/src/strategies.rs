//! proptest strategies the property tests of several modules share: arbitrary text, for
//! the "any input gets an answer, never a panic" properties of every parser.

use proptest::prelude::*;

/// Any Unicode text of fewer than `max` characters: control characters, multi-byte ones
/// and unassigned code points included.
pub(crate) fn any_text(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..max).prop_map(String::from_iter)
}
