//! Keeping a lambda's secrets out of what leaves the sandbox: its log, its
//! error messages and its output. A lambda that echoes a secret's value
//! shows `[redacted]` where it was.
//!
//! Values shorter than [`Redactor::MIN_LEN`] bytes are not redacted: they
//! would blank out ordinary text, and a secret that short guards nothing.

/// The secret values of one execution.
#[derive(Debug, Default)]
pub(crate) struct Redactor {
    /// Longest first, so a value that contains another goes whole.
    values: Vec<String>,
}

/// What a redacted value is replaced with.
const MARK: &str = "[redacted]";

impl Redactor {
    pub(crate) const MIN_LEN: usize = 4;

    pub(crate) fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut values: Vec<String> = values
            .into_iter()
            .filter(|v| v.len() >= Self::MIN_LEN)
            .map(str::to_owned)
            .collect();
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        Self { values }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub(crate) fn text(&self, text: String) -> String {
        if self.values.iter().all(|v| !text.contains(v.as_str())) {
            return text;
        }
        let mut text = text;
        for value in &self.values {
            text = text.replace(value.as_str(), MARK);
        }
        text
    }

    pub(crate) fn bytes(&self, bytes: Vec<u8>) -> Vec<u8> {
        let mut bytes = bytes;
        for value in &self.values {
            let needle = value.as_bytes();
            if !bytes.windows(needle.len()).any(|w| w == needle) {
                continue;
            }
            let mut out = Vec::with_capacity(bytes.len());
            let mut i = 0;
            while i < bytes.len() {
                if bytes[i..].starts_with(needle) {
                    out.extend_from_slice(MARK.as_bytes());
                    i += needle.len();
                } else {
                    out.push(bytes[i]);
                    i += 1;
                }
            }
            bytes = out;
        }
        bytes
    }
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
}
