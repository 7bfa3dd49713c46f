//! HMAC-SHA256 under a key of any length, built without a fallible constructor: the
//! webhook URL tokens (hooks.rs), the idempotency fingerprints (dispatch) and the
//! verification codes (verify) all key one this way.

use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// HMAC-SHA256.
pub type HmacSha256 = Hmac<Sha256>;

/// A MAC under `key`. As RFC 2104 says, a key longer than SHA-256's 64-byte block is
/// hashed first and a shorter one padded with zeros, so every length is a key.
pub fn keyed(key: &[u8]) -> HmacSha256 {
    let mut block = [0u8; 64];
    if key.len() > block.len() {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    <HmacSha256 as KeyInit>::new(&block.into())
}

/// The tag of `parts`, one after another, under `key`.
pub fn tag(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = keyed(key);
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_every_length_give_the_standard_hmac() {
        for len in [0, 1, 31, 32, 63, 64, 65, 200] {
            let key: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut standard = <HmacSha256 as Mac>::new_from_slice(&key).expect("any length");
            standard.update(b"message");
            assert_eq!(
                tag(&key, &[b"mess", b"age"]),
                <[u8; 32]>::from(standard.finalize().into_bytes()),
                "key of {len} bytes"
            );
        }
    }
}
