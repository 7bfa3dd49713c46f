//! The calls that answer from a pending verification and send nothing: check a code,
//! get it, cancel it.

use chrono::Utc;

use super::{Verifier, View, store_error};
use crate::auth::Caller;
use crate::domain::{Error, Phone, VerificationStatus};
use crate::store::VerificationChange;

impl Verifier {
    fn count_check(&self, outcome: &str) {
        self.metrics()
            .verification_checks_total
            .with_label_values(&[outcome])
            .inc();
    }

    /// Checks `code` against the caller's pending verification of `phone`.
    pub async fn check(&self, caller: &Caller, phone: Phone, code: &str) -> Result<View, Error> {
        let name = caller.name.as_ref();
        let Some(pending) = self.pending(name, phone).await? else {
            self.count_check("not_found");
            return Err(Error::VerificationNotFound);
        };
        let now = Utc::now();
        let right = pending
            .code
            .as_ref()
            .filter(|stored| self.codes.matches(pending.id, stored, code));
        let change = match right {
            Some(stored) => VerificationChange::Approve {
                id: pending.id,
                mac: stored.mac.clone(),
                at: now,
            },
            None => VerificationChange::WrongCode {
                id: pending.id,
                at: now,
            },
        };
        let Some(record) = self
            .store
            .change_verification(&change)
            .await
            .map_err(store_error)?
        else {
            // Another check (or a cancel, or the clock) got there first.
            self.count_check("not_found");
            return Err(Error::VerificationNotFound);
        };
        match record.status {
            VerificationStatus::Approved => {
                self.count_check("approved");
                self.count(VerificationStatus::Approved, &record);
                self.guard.count(record.phone, "approved");
                self.guard
                    .approved(self.store.as_ref(), record.phone, now)
                    .await;
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
    pub async fn get(&self, caller: &Caller, phone: Phone) -> Result<View, Error> {
        self.pending(caller.name.as_ref(), phone)
            .await?
            .map(|record| self.view(record))
            .ok_or(Error::VerificationNotFound)
    }

    /// Cancels the caller's pending verification of `phone`.
    pub async fn cancel(&self, caller: &Caller, phone: Phone) -> Result<View, Error> {
        let pending = self
            .pending(caller.name.as_ref(), phone)
            .await?
            .ok_or(Error::VerificationNotFound)?;
        let change = VerificationChange::Cancel {
            id: pending.id,
            at: Utc::now(),
        };
        let record = self
            .store
            .change_verification(&change)
            .await
            .map_err(store_error)?
            .ok_or(Error::VerificationNotFound)?;
        self.count(VerificationStatus::Canceled, &record);
        Ok(self.view(record))
    }
}
