//! Hook URLs and their tokens: `<client id>.<HMAC-SHA256 over the client id,
//! base64url>`, so a webhook proves which message it is about before its body is
//! read, without any lookup. `dispatch/` signs them into every send; `webhook/`
//! verifies them.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use hmac::Mac;

use crate::core::mac::HmacSha256;
use secrecy::{ExposeSecret, SecretSlice, SecretString};

use crate::core::domain::ClientId;

/// Signs and verifies per-message hook tokens.
#[derive(Clone)]
pub struct HookSigner {
    key: SecretSlice<u8>,
    /// The key before a rotation: verifies, never signs.
    previous: Option<SecretSlice<u8>>,
}

impl std::fmt::Debug for HookSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookSigner(..)")
    }
}

impl HookSigner {
    /// A signer with this secret.
    pub fn new(secret: &SecretString) -> Self {
        Self {
            key: secret.expose_secret().as_bytes().to_vec().into(),
            previous: None,
        }
    }

    /// Also accepts tokens signed with `previous` (the secret before a rotation), so
    /// webhooks of messages sent before it still verify.
    pub fn with_previous(mut self, previous: Option<&SecretString>) -> Self {
        self.previous = previous.map(|p| p.expose_secret().as_bytes().to_vec().into());
        self
    }

    fn mac(key: &SecretSlice<u8>, client_id: ClientId) -> HmacSha256 {
        let mut mac = crate::core::mac::keyed(key.expose_secret());
        mac.update(client_id.get().to_string().as_bytes());
        mac
    }

    /// The token of a message's hook URL (always under the current secret).
    pub fn token(&self, client_id: ClientId) -> String {
        format!(
            "{}.{}",
            client_id.get(),
            URL_SAFE_NO_PAD.encode(Self::mac(&self.key, client_id).finalize().into_bytes())
        )
    }

    /// What a presented token proves (the MAC compared in constant time).
    pub fn open(&self, token: &str) -> Token {
        match token.split_once('.') {
            Some((id, mac)) => match id.parse::<u64>().ok().and_then(|id| ClientId::new(id).ok()) {
                Some(id) if self.mac_matches(id, mac) => Token::Message(id),
                _ => Token::Forged,
            },
            // A token of an earlier msgw version: the MAC alone, the id in the body.
            None if URL_SAFE_NO_PAD.decode(token).is_ok_and(|b| b.len() == 32) => Token::Legacy,
            None => Token::Forged,
        }
    }

    /// Whether a token of an earlier version (the MAC alone) was issued for `client_id`.
    pub fn verify_legacy(&self, client_id: ClientId, token: &str) -> bool {
        self.mac_matches(client_id, token)
    }

    /// Whether `mac` is the MAC of `client_id` under the current or the previous
    /// secret (each compared in constant time).
    fn mac_matches(&self, client_id: ClientId, mac: &str) -> bool {
        let Ok(bytes) = URL_SAFE_NO_PAD.decode(mac) else {
            return false;
        };
        std::iter::once(&self.key)
            .chain(&self.previous)
            .any(|key| Self::mac(key, client_id).verify_slice(&bytes).is_ok())
    }
}

/// What a per-message hook token proves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token {
    /// Issued by this secret (or the previous one) for this client id.
    Message(ClientId),
    /// The format of an earlier version (hooks of messages sent before an upgrade): the
    /// client id comes from the body and is verified against it.
    Legacy,
    /// Not issued by this secret.
    Forged,
}

/// The URLs the gateway posts statuses to.
#[derive(Debug, Clone)]
pub struct HookUrls {
    base: String,
    signer: HookSigner,
}

impl HookUrls {
    /// URLs under `public_url` (where the gateway reaches msgw's HTTP listener).
    pub fn new(public_url: &url::Url, signer: HookSigner) -> Self {
        Self {
            base: public_url.as_str().trim_end_matches('/').to_owned(),
            signer,
        }
    }

    /// The hook URL of one message.
    pub fn status_url(&self, client_id: ClientId) -> String {
        format!(
            "{}/v1/webhooks/status/{}",
            self.base,
            self.signer.token(client_id)
        )
    }

    /// The account-level URL for pipeline statuses.
    pub fn account_url(&self, account_token: &SecretString) -> String {
        format!(
            "{}/v1/webhooks/account/{}",
            self.base,
            account_token.expose_secret()
        )
    }
}

/// Compares a presented account token with the configured one in constant time.
pub fn same_token(presented: &str, expected: &SecretString) -> bool {
    use subtle::ConstantTimeEq;
    // Only the length may show in the timing: it is not secret (at least 16 characters).
    bool::from(
        presented
            .as_bytes()
            .ct_eq(expected.expose_secret().as_bytes()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> ClientId {
        ClientId::new(n).unwrap()
    }

    #[test]
    fn tokens_prove_their_message_only_with_their_secret() {
        let signer = HookSigner::new(&SecretString::from("s3cret"));
        let token = signer.token(id(100500));
        assert_eq!(signer.open(&token), Token::Message(id(100500)));
        let (_, mac) = token.split_once('.').unwrap();
        assert_eq!(signer.open(&format!("100501.{mac}")), Token::Forged);
        assert_eq!(signer.open("0.AAAA"), Token::Forged);
        assert_eq!(signer.open("not-a-token"), Token::Forged);
        assert_eq!(
            HookSigner::new(&SecretString::from("other")).open(&token),
            Token::Forged
        );
        assert!(
            !token.contains(['+', '/', '=']),
            "URL-safe without padding: {token}"
        );
        // The format before the id was part of the token still verifies, by the body's id.
        assert_eq!(signer.open(mac), Token::Legacy);
        assert!(signer.verify_legacy(id(100500), mac));
        assert!(!signer.verify_legacy(id(100501), mac));
    }

    #[test]
    fn account_tokens_compare_exactly() {
        let t = SecretString::from("abc");
        assert!(same_token("abc", &t));
        assert!(!same_token("abd", &t));
        assert!(!same_token("ab", &t));
    }

    #[test]
    fn after_a_rotation_tokens_of_the_previous_secret_still_verify() {
        let old = HookSigner::new(&SecretString::from("the-old-secret-0123"));
        let rotated = HookSigner::new(&SecretString::from("the-new-secret-0123"))
            .with_previous(Some(&SecretString::from("the-old-secret-0123")));
        let before = old.token(id(42));
        assert_eq!(rotated.open(&before), Token::Message(id(42)));
        assert_ne!(
            rotated.token(id(42)),
            before,
            "new hooks are signed with the new secret"
        );
        assert_eq!(old.open(&rotated.token(id(42))), Token::Forged);
        let without = HookSigner::new(&SecretString::from("the-new-secret-0123"));
        assert_eq!(without.open(&before), Token::Forged);
        let (_, mac) = before.split_once('.').unwrap();
        assert!(rotated.verify_legacy(id(42), mac));
    }
}
