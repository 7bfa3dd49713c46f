//! One-time codes: made by a CSPRNG, kept only as an HMAC (to check) and sealed (to
//! send again on a resend), both under keys derived from the verify secret, which is
//! never in the store. Whoever reads the store learns nothing of a code: the HMAC
//! cannot be tried without the key, and the seal is the code XOR a keystream that is
//! an HMAC of a random nonce under the key.

use rand::Rng;
use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

use crate::core::dispatch::Confidential;
use crate::core::domain::ClientId;
use crate::core::mac::tag as hmac;
use crate::core::ports::store::StoredCode;

/// Digits of a code, at most (msgw's own are 4 to 8; the gateway's voice codes are 4).
pub const MAX_DIGITS: usize = 16;

/// A code in plain text: only in memory, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Code(String);

impl std::fmt::Debug for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Code(..)")
    }
}

impl Code {
    /// A fresh code of `digits` digits from the thread's CSPRNG.
    pub fn generate(digits: usize) -> Self {
        let mut rng = rand::rng();
        Self(
            (0..digits)
                .map(|_| char::from(b'0' + rng.random_range(0..10u8)))
                .collect(),
        )
    }

    /// A code the gateway chose (its voice call's): 1 to [`MAX_DIGITS`] digits.
    pub fn given(digits: &str) -> Option<Self> {
        ((1..=MAX_DIGITS).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| Self(digits.to_owned()))
    }

    /// The digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The keys codes are kept under, derived from the verify secret.
#[derive(Clone)]
pub struct Codes {
    mac_key: [u8; 32],
    seal_key: [u8; 32],
    claims_key: [u8; 32],
    guard_key: [u8; 32],
}

impl std::fmt::Debug for Codes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Codes(..)")
    }
}

impl Codes {
    /// Keys derived from `secret`, one per use.
    pub fn new(secret: &SecretString) -> Self {
        let secret = secret.expose_secret().as_bytes();
        Self {
            mac_key: hmac(secret, &[b"msgw verify: code mac"]),
            seal_key: hmac(secret, &[b"msgw verify: code seal"]),
            claims_key: hmac(secret, &[b"msgw verify: claim fingerprints"]),
            guard_key: hmac(secret, &[b"msgw verify: guard rate-limit keys"]),
        }
    }

    /// How the claims of sends carrying codes are kept.
    pub fn confidential(&self) -> Confidential {
        Confidential::new(self.claims_key)
    }

    /// The HMAC a caller-supplied rate-limit key is counted by: its value (an IP, a
    /// user) is personal data, never stored; the name keeps `ip=x` and `user=x` apart.
    pub fn rate_limit_key(&self, name: &str, value: &str) -> Vec<u8> {
        hmac(&self.guard_key, &[name.as_bytes(), &[0], value.as_bytes()]).to_vec()
    }

    /// The keyed fingerprint of a StartVerification's request, given in its
    /// canonical form (`StartVerification::canonical`), which its send id stays tied
    /// to: equal requests have equal fingerprints, and the store learns nothing of the
    /// request from it.
    pub fn request_mac(&self, canonical: &[u8]) -> Vec<u8> {
        hmac(&self.claims_key, &[b"request\0", canonical]).to_vec()
    }

    /// The HMAC of `code` for verification `id` (bound to it: the same code in two
    /// verifications has two HMACs).
    fn mac(&self, id: ClientId, code: &[u8]) -> [u8; 32] {
        hmac(&self.mac_key, &[&id.get().to_be_bytes(), code])
    }

    fn keystream(&self, nonce: &[u8]) -> [u8; 32] {
        hmac(&self.seal_key, &[nonce])
    }

    /// `code` of verification `id` as the store keeps it.
    pub fn keep(&self, id: ClientId, code: &Code) -> StoredCode {
        let nonce: [u8; 16] = rand::rng().random();
        let stream = self.keystream(&nonce);
        let sealed = code
            .0
            .bytes()
            .zip(stream)
            .map(|(digit, key)| digit ^ key)
            .collect();
        StoredCode {
            mac: self.mac(id, code.0.as_bytes()).to_vec(),
            sealed,
            nonce: nonce.to_vec(),
        }
    }

    /// The code a stored one seals (`None`: not sealed under this secret).
    pub fn open(&self, id: ClientId, stored: &StoredCode) -> Option<Code> {
        let stream = self.keystream(&stored.nonce);
        if stored.sealed.len() > stream.len() {
            return None;
        }
        let digits: Vec<u8> = stored
            .sealed
            .iter()
            .zip(stream)
            .map(|(b, key)| b ^ key)
            .collect();
        let code = Code::given(std::str::from_utf8(&digits).ok()?)?;
        self.matches(id, stored, code.as_str()).then_some(code)
    }

    /// Whether `candidate` is the code of verification `id`, compared in constant time.
    pub fn matches(&self, id: ClientId, stored: &StoredCode, candidate: &str) -> bool {
        let mac = self.mac(id, candidate.as_bytes());
        bool::from(mac[..].ct_eq(&stored.mac[..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(secret: &str) -> Codes {
        Codes::new(&SecretString::from(secret.to_owned()))
    }

    #[test]
    fn a_kept_code_opens_and_checks_only_under_its_secret() {
        let id = ClientId::new(42).unwrap();
        let code = Code::generate(6);
        assert_eq!(code.as_str().len(), 6);
        let kept = codes("secret-one-0123456789").keep(id, &code);
        assert!(
            !kept
                .sealed
                .windows(6)
                .any(|w| w == code.as_str().as_bytes())
        );
        let one = codes("secret-one-0123456789");
        assert_eq!(one.open(id, &kept), Some(code.clone()));
        assert!(one.matches(id, &kept, code.as_str()));
        assert!(!one.matches(ClientId::new(43).unwrap(), &kept, code.as_str()));
        let other = codes("secret-two-0123456789");
        assert_eq!(other.open(id, &kept), None);
        assert!(!other.matches(id, &kept, code.as_str()));
    }

    #[test]
    fn codes_are_digits_and_vary() {
        let all: std::collections::HashSet<String> = (0..50).map(|_| Code::generate(8).0).collect();
        assert!(all.len() > 45);
        assert!(all.iter().all(|c| c.bytes().all(|b| b.is_ascii_digit())));
        assert!(Code::given("0471").is_some());
        assert!(Code::given("04a1").is_none());
        assert!(Code::given("").is_none());
    }
}
