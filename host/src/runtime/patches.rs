//! Patch markers: `patched(change-id)`, which lets one build serve the runs
//! recorded before a change to the workflow's code and those after it.
//!
//! A run that reaches the call on a build that makes it, past its recorded
//! history, journals a marker named by the change and takes the changed
//! code (`true`). A replay finds the marker and answers `true` again. A
//! journal recorded by code before the change has another call where the
//! marker would be: the answer is `false` and no seq is taken, so that
//! call is still the next one (see [`Cursor::patch_mark`]). The first
//! answer for a change holds for the rest of the execution, as Temporal's
//! `patched` does, so asking again journals nothing.
//!
//! [`Cursor::patch_mark`]: crate::journal::Cursor::patch_mark

use std::collections::HashMap;

use super::interruption::Interruption;

/// The longest change id `patched` takes, in bytes: the WIT promises it.
pub const MAX_CHANGE_ID_BYTES: usize = 256;

/// The answers one execution has given `patched`, by change id.
#[derive(Debug, Default)]
pub struct PatchAnswers {
    answers: HashMap<String, bool>,
}

impl PatchAnswers {
    /// The answer already given for `change`, if any.
    pub(super) fn given(&self, change: &str) -> Option<bool> {
        self.answers.get(change).copied()
    }

    /// Checks that `change` may be answered: a change id of 1 to
    /// [`MAX_CHANGE_ID_BYTES`] bytes, and room for one more answer among
    /// at most `limit` (answers are kept in the host's memory, and `false`
    /// ones cost no journal entry to bound them).
    pub(super) fn admit(&self, change: &str, limit: usize) -> Result<(), Interruption> {
        if change.is_empty() {
            return Err(Interruption::InvalidCall(
                "`patched` was given an empty change id: name the change".into(),
            ));
        }
        if change.len() > MAX_CHANGE_ID_BYTES {
            return Err(Interruption::InvalidCall(format!(
                "the change id given to `patched` is {} bytes, over the limit of {MAX_CHANGE_ID_BYTES} bytes",
                change.len()
            )));
        }
        if self.answers.len() >= limit {
            return Err(Interruption::InvalidCall(format!(
                "the workflow asked `patched` about more than the host's limit of {limit} changes in one execution"
            )));
        }
        Ok(())
    }

    pub(super) fn remember(&mut self, change: String, answer: bool) {
        self.answers.insert(change, answer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(answers: &PatchAnswers, change: &str, limit: usize) -> String {
        match answers.admit(change, limit) {
            Err(Interruption::InvalidCall(message)) => message,
            other => panic!("{change:?} was not refused as an invalid call: {other:?}"),
        }
    }

    #[test]
    fn a_change_id_is_one_to_256_bytes() {
        let answers = PatchAnswers::default();
        assert!(answers.admit("x", 10).is_ok());
        assert!(answers.admit(&"é".repeat(128), 10).is_ok(), "256 bytes");
        let message = refusal(&answers, &"x".repeat(MAX_CHANGE_ID_BYTES + 1), 10);
        assert!(
            message.contains("257 bytes") && message.contains("limit of 256 bytes"),
            "{message}"
        );
        assert!(refusal(&answers, "", 10).contains("empty change id"));
    }

    #[test]
    fn answers_are_remembered_up_to_the_limit_of_changes() {
        let mut answers = PatchAnswers::default();
        answers.remember("a".into(), false);
        answers.remember("b".into(), true);
        assert_eq!(
            (answers.given("a"), answers.given("b"), answers.given("c")),
            (Some(false), Some(true), None)
        );
        assert!(answers.admit("c", 3).is_ok(), "a third change within a limit of 3");
        answers.remember("c".into(), true);
        let message = refusal(&answers, "d", 3);
        assert!(message.contains("limit of 3 changes"), "{message}");
    }
}
