//! Hook URLs and their tokens: HMAC-SHA256 over the client id, base64url, so a
//! webhook proves it is about the message msgw sent, without any lookup. `dispatch/`
//! signs them into every send; `webhook/` verifies them.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretSlice, SecretString};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Signs and verifies per-message hook tokens.
#[derive(Clone)]
pub struct HookSigner {
    key: SecretSlice<u8>,
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
        }
    }

    fn mac(&self, client_id: u64) -> HmacSha256 {
        // HMAC takes keys of any length, so this cannot fail.
        let mut mac = HmacSha256::new_from_slice(self.key.expose_secret())
            .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
        mac.update(client_id.to_string().as_bytes());
        mac
    }

    /// The token of a message's hook URL.
    pub fn token(&self, client_id: u64) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(client_id).finalize().into_bytes())
    }

    /// Whether `token` was issued for `client_id` (constant-time).
    pub fn verify(&self, client_id: u64, token: &str) -> bool {
        match URL_SAFE_NO_PAD.decode(token) {
            Ok(bytes) => self.mac(client_id).verify_slice(&bytes).is_ok(),
            Err(_) => false,
        }
    }
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
    pub fn status_url(&self, client_id: u64) -> String {
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
    let (a, b) = (presented.as_bytes(), expected.expose_secret().as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_only_for_their_message_and_secret() {
        let signer = HookSigner::new(&SecretString::from("s3cret"));
        let token = signer.token(100500);
        assert!(signer.verify(100500, &token));
        assert!(!signer.verify(100501, &token));
        assert!(!signer.verify(100500, "not-a-token"));
        assert!(!HookSigner::new(&SecretString::from("other")).verify(100500, &token));
        assert!(
            !token.contains(['+', '/', '=']),
            "base64url without padding: {token}"
        );
    }

    #[test]
    fn account_tokens_compare_exactly() {
        let t = SecretString::from("abc");
        assert!(same_token("abc", &t));
        assert!(!same_token("abd", &t));
        assert!(!same_token("ab", &t));
    }
}
