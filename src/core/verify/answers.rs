//! The calls that answer from a pending verification and send nothing: check a code,
//! get it, cancel it; one store call each.

use chrono::Utc;

use super::{Verifier, View, store_error};
use crate::core::domain::{CallerName, Error, Phone, VerificationStatus};
use crate::core::ports::store::VerificationRecord;

impl Verifier {
    fn count_check(&self, outcome: &str) {
        self.metrics()
            .verify
            .verification_checks_total
            .with_label_values(&[outcome])
            .inc();
    }

    /// Checks `code` against the caller's pending verification of `phone`.
    pub async fn check(
        &self,
        caller: Option<&CallerName>,
        phone: Phone,
        code: &str,
    ) -> Result<View, Error> {
        let now = Utc::now();
        let right = |pending: &VerificationRecord| {
            pending
                .code
                .as_ref()
                .is_some_and(|stored| self.codes.matches(pending.id, stored, code))
        };
        let lift = self.guard.lift_check(phone, now);
        let decided = self
            .store
            .check_verification(caller, phone, now, &right, lift.as_ref())
            .await
            .map_err(store_error)?;
        self.count_expired(&decided.expired);
        let Some(record) = decided.outcome else {
            self.count_check("not_found");
            return Err(Error::VerificationNotFound);
        };
        match record.status {
            VerificationStatus::Approved => {
                self.count_check("approved");
                self.count(VerificationStatus::Approved, &record);
                self.guard.count(record.phone, "approved");
                self.guard.lifted(&decided.findings);
            }
            VerificationStatus::Failed => {
                self.count_check("failed");
                self.count(VerificationStatus::Failed, &record);
            }
            _ => self.count_check("wrong"),
        }
        Ok(self.view(record))
    }

    /// The caller's pending verification of `phone`.
    pub async fn get(&self, caller: Option<&CallerName>, phone: Phone) -> Result<View, Error> {
        let decided = self
            .store
            .pending_verification(caller, phone, Utc::now())
            .await
            .map_err(store_error)?;
        self.count_expired(&decided.expired);
        decided
            .outcome
            .map(|record| self.view(record))
            .ok_or(Error::VerificationNotFound)
    }

    /// Cancels the caller's pending verification of `phone`.
    pub async fn cancel(&self, caller: Option<&CallerName>, phone: Phone) -> Result<View, Error> {
        let decided = self
            .store
            .cancel_verification(caller, phone, Utc::now())
            .await
            .map_err(store_error)?;
        self.count_expired(&decided.expired);
        let record = decided.outcome.ok_or(Error::VerificationNotFound)?;
        self.count(VerificationStatus::Canceled, &record);
        Ok(self.view(record))
    }
}
