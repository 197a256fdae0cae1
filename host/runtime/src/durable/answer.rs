//! How the journal keeps a call: a digest of its arguments, and its
//! answer encoded (postcard: compact, typed, and the same on every host).

use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest as _, Sha256};

/// SHA-256 of a call's name and arguments.
pub(crate) type Digest = [u8; 32];

/// The digest of `call` with `arguments`.
pub(crate) fn digest(call: &str, arguments: &impl Serialize) -> Digest {
    let mut hasher = Sha256::new();
    hasher.update(call.as_bytes());
    hasher.update([0]);
    // Encoding into memory fails only on types serde cannot represent,
    // which no argument is.
    hasher.update(postcard::to_allocvec(arguments).unwrap_or_default());
    hasher.finalize().into()
}

/// An answer as the journal keeps it.
pub(crate) fn encode(answer: &impl Serialize) -> Vec<u8> {
    postcard::to_allocvec(answer).unwrap_or_default()
}

/// An answer the journal kept; `None` when it is not one of type `T`.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Option<T> {
    postcard::from_bytes(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_and_digests_tell_arguments_apart() {
        let answer = (200u16, vec![("a".to_owned(), vec![0u8, 255])], vec![1u8; 3]);
        assert_eq!(
            decode::<(u16, Vec<(String, Vec<u8>)>, Vec<u8>)>(&encode(&answer)),
            Some(answer)
        );
        assert_eq!(decode::<u64>(&[]), None);
        assert_eq!(digest("get", &"KEY"), digest("get", &"KEY"));
        assert_ne!(digest("get", &"KEY"), digest("get", &"KEZ"));
        assert_ne!(digest("get", &"KEY"), digest("got", &"KEY"));
    }
}
