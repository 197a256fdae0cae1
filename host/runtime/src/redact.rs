//! Keeping a lambda's secrets out of what leaves the sandbox: its log, its
//! error messages and its output. A lambda that echoes a secret's value
//! shows `[redacted]` where it was.
//!
//! Values shorter than [`Redactor::MIN_LEN`] bytes are not redacted: they
//! would blank out ordinary text, and a secret that short guards nothing.
//!
//! Redaction runs on the host after the guest's work, outside its deadline,
//! on texts as long as the lambda's output: each value is searched for in
//! time linear in the text and the value (`memchr::memmem`), whatever the
//! two hold.

use memchr::memmem::Finder;

/// The secret values of one execution.
#[derive(Debug, Default)]
pub(crate) struct Redactor {
    /// Searchers for the values, longest first, so a value that contains
    /// another goes whole.
    values: Vec<Finder<'static>>,
}

/// What a redacted value is replaced with.
const MARK: &str = "[redacted]";

impl Redactor {
    pub(crate) const MIN_LEN: usize = 4;

    pub(crate) fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut values: Vec<&str> = values
            .into_iter()
            .filter(|v| v.len() >= Self::MIN_LEN)
            .collect();
        values.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        values.dedup();
        let values = values
            .into_iter()
            .map(|v| Finder::new(v).into_owned())
            .collect();
        Self { values }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub(crate) fn text(&self, text: String) -> String {
        let mut text = text;
        for value in &self.values {
            if let Some(redacted) = replace(value, text.as_bytes()) {
                // Whole UTF-8 values replaced by ASCII leave UTF-8: the
                // lossy path is never taken.
                text = String::from_utf8(redacted)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
            }
        }
        text
    }

    pub(crate) fn bytes(&self, bytes: Vec<u8>) -> Vec<u8> {
        let mut bytes = bytes;
        for value in &self.values {
            if let Some(redacted) = replace(value, &bytes) {
                bytes = redacted;
            }
        }
        bytes
    }
}

/// `haystack` with every occurrence of `value` (left to right, none
/// overlapping) replaced by [`MARK`]; `None` when there is none.
fn replace(value: &Finder<'_>, haystack: &[u8]) -> Option<Vec<u8>> {
    let mut found = value.find_iter(haystack).peekable();
    found.peek()?;
    let mut out = Vec::with_capacity(haystack.len());
    let mut copied = 0;
    for at in found {
        // Occurrences come in order and do not overlap: `copied <= at`.
        out.extend_from_slice(&haystack[copied..at]);
        out.extend_from_slice(MARK.as_bytes());
        copied = at + value.needle().len();
    }
    out.extend_from_slice(&haystack[copied..]);
    out.shrink_to_fit();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_occurrence_goes_and_short_values_stay() {
        let redactor = Redactor::new(["hunter22", "hunter2222", "abc"]);
        assert_eq!(
            redactor.text("pw hunter2222 and hunter22, abc".into()),
            "pw [redacted] and [redacted], abc"
        );
        assert_eq!(
            redactor.bytes(b"{\"t\":\"hunter22\"}".to_vec()),
            b"{\"t\":\"[redacted]\"}"
        );
        assert!(Redactor::new(["abc"]).is_empty());
    }

    /// Overlapping and adjacent occurrences, values inside values, repeated
    /// values and text around multi-byte characters: the same as replacing
    /// each value in turn, longest first, with `str::replace`.
    #[test]
    fn every_case_matches_plain_replacement() {
        let values = ["aaaa", "abab", "ababab", "naïve", "ïve!", "aaaa"];
        let redactor = Redactor::new(values);
        let mut plain: Vec<&str> = values.to_vec();
        plain.sort_by_key(|v| std::cmp::Reverse(v.len()));
        for text in [
            "aaaaaaaaa",
            "abababab ababab abab",
            "naïve! naïve!naïve",
            "aaaabababnaïve!",
            "é aaa ï",
            "",
        ] {
            let expected = plain
                .iter()
                .fold(text.to_owned(), |t, v| t.replace(v, MARK));
            assert_eq!(redactor.text(text.to_owned()), expected, "{text:?}");
            assert_eq!(
                redactor.bytes(text.as_bytes().to_vec()),
                expected.as_bytes(),
                "{text:?}"
            );
        }
    }

    /// A secret that almost matches everywhere is the worst case of a naive
    /// search: every position compares the whole secret, some 4·10¹²
    /// comparisons here, hours of the host's time. Redaction stays linear in
    /// the text, so 64 MiB against a 64 KiB secret takes moments.
    #[test]
    fn a_near_miss_everywhere_is_linear() {
        let mut secret = "a".repeat(64 * 1024 - 1);
        secret.push('b');
        let redactor = Redactor::new([secret.as_str()]);
        let started = std::time::Instant::now();
        let text = "a".repeat(64 << 20);
        let mut bytes = text.clone().into_bytes();
        bytes.extend_from_slice(secret.as_bytes());
        let bytes = redactor.bytes(bytes);
        assert_eq!(bytes.len(), (64 << 20) + MARK.len());
        assert!(bytes.ends_with(b"a[redacted]"));
        assert_eq!(redactor.text(text).len(), 64 << 20);
        let took = started.elapsed();
        assert!(took.as_secs() < 30, "took {took:?}");
    }
}
