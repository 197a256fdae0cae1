//! A task's place in a distributed trace: the W3C Trace Context
//! (`traceparent`, and `tracestate` when one came with it) that travels
//! with the task from `Schedule` through the store, the queue and the
//! claim to each execution, so that every step's span joins the trace its
//! client started.
//!
//! Parsing is strict and never panics: a header that is not a valid
//! version-00 `traceparent` (lowercase hex, no all-zero ids) is refused,
//! so nothing malformed is stored, queued or sent on. A future version's
//! header is read by its version-00 prefix, as the W3C specification asks.

use std::fmt;

/// The longest `tracestate` kept: the specification's 32 members of at
/// most 256 characters each would not fit a sensible row; 512 bytes is
/// what its vendors are told to expect to survive.
pub const MAX_TRACESTATE: usize = 512;

/// A valid W3C trace context.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TraceContext {
    /// `00-<32 hex trace id>-<16 hex span id>-<2 hex flags>`.
    pub traceparent: String,
    /// Vendor data of the trace, passed on as given.
    pub tracestate: Option<String>,
}

/// Why a `traceparent` or `tracestate` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceContextError {
    #[error("traceparent {0:?} is not 00-<32 hex>-<16 hex>-<2 hex> (lowercase, non-zero ids)")]
    Traceparent(String),
    #[error("tracestate is longer than {MAX_TRACESTATE} bytes or not printable ASCII")]
    Tracestate,
}

impl TraceContext {
    /// A context from a client's headers; the traceparent is normalised to
    /// version 00 (a later version's extra fields are dropped).
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Result<Self, TraceContextError> {
        let traceparent = parse_traceparent(traceparent.trim())
            .ok_or_else(|| TraceContextError::Traceparent(shorten(traceparent)))?;
        let tracestate = match tracestate.map(str::trim).filter(|s| !s.is_empty()) {
            None => None,
            Some(state) if state.len() <= MAX_TRACESTATE && is_printable(state) => {
                Some(state.to_owned())
            }
            Some(_) => return Err(TraceContextError::Tracestate),
        };
        Ok(Self {
            traceparent,
            tracestate,
        })
    }

    /// The trace id: 32 lowercase hex digits.
    pub fn trace_id(&self) -> &str {
        &self.traceparent[3..35]
    }

    /// The parent span's id: 16 lowercase hex digits.
    pub fn span_id(&self) -> &str {
        &self.traceparent[36..52]
    }

    /// Whether the caller recorded the trace (the `sampled` flag).
    pub fn sampled(&self) -> bool {
        u8::from_str_radix(&self.traceparent[53..55], 16).is_ok_and(|flags| flags & 1 == 1)
    }
}

impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.traceparent)
    }
}

/// The version-00 form of a valid `traceparent`.
fn parse_traceparent(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    if bytes.len() < 55 || !text.is_ascii() {
        return None;
    }
    let version = &text[0..2];
    if !is_hex(version) || version == "ff" {
        return None;
    }
    // Version 00 is exactly 55 characters; a later one may append fields
    // after a dash.
    if (version == "00" && bytes.len() != 55) || (bytes.len() > 55 && bytes[55] != b'-') {
        return None;
    }
    let (trace_id, span_id, flags) = (&text[3..35], &text[36..52], &text[53..55]);
    let dashes = bytes[2] == b'-' && bytes[35] == b'-' && bytes[52] == b'-';
    let valid = dashes
        && is_hex(trace_id)
        && is_hex(span_id)
        && is_hex(flags)
        && trace_id.bytes().any(|b| b != b'0')
        && span_id.bytes().any(|b| b != b'0');
    valid.then(|| format!("00-{trace_id}-{span_id}-{flags}"))
}

fn is_hex(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn is_printable(text: &str) -> bool {
    text.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// At most 64 characters of a refused value, for an error message.
fn shorten(text: &str) -> String {
    text.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_read() {
        let cx = TraceContext::parse(GOOD, Some("congo=t61rcWkgMzE")).unwrap();
        assert_eq!(cx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(cx.span_id(), "00f067aa0ba902b7");
        assert!(cx.sampled());
        assert_eq!(cx.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
        let unsampled = GOOD.replace("-01", "-00");
        assert!(!TraceContext::parse(&unsampled, None).unwrap().sampled());
    }

    #[test]
    fn a_later_version_is_read_as_version_00() {
        let later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        assert_eq!(TraceContext::parse(later, None).unwrap().traceparent, GOOD);
    }

    #[test]
    fn bad_traceparents_are_refused() {
        for bad in [
            "",
            "00",
            "garbage",
            &GOOD.to_uppercase(),
            &GOOD.replace("4bf92f3577b34da6a3ce929d0e0e4736", &"0".repeat(32)),
            &GOOD.replace("00f067aa0ba902b7", &"0".repeat(16)),
            &GOOD.replacen("00-", "ff-", 1),
            &format!("{GOOD}-extra"),
            &GOOD.replace('-', "_"),
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-701",
        ] {
            assert!(TraceContext::parse(bad, None).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bad_tracestates_are_refused_and_empty_ones_dropped() {
        assert!(TraceContext::parse(GOOD, Some("a=\u{7}")).is_err());
        assert!(TraceContext::parse(GOOD, Some(&"a".repeat(MAX_TRACESTATE + 1))).is_err());
        assert_eq!(
            TraceContext::parse(GOOD, Some(" ")).unwrap().tracestate,
            None
        );
    }

    proptest::proptest! {
        #[test]
        fn no_input_panics(parent in "\\PC*", state in proptest::option::of("\\PC*")) {
            if let Ok(cx) = TraceContext::parse(&parent, state.as_deref()) {
                proptest::prop_assert_eq!(cx.traceparent.len(), 55);
                let _ = (cx.trace_id(), cx.span_id(), cx.sampled());
            }
        }

        #[test]
        fn near_misses_never_panic(bytes in proptest::collection::vec(
            proptest::sample::select(b"0123456789abcdefF-x\xc3\xa9".to_vec()), 50..60)) {
            let text = String::from_utf8_lossy(&bytes);
            let _ = TraceContext::parse(&text, None);
        }
    }
}
