//! Scheduled sends an earlier version of msgw kept: it stored their requests in the gRPC
//! layer's encoding, this version stores core's own form (core/schedule/kept/). As msgw
//! starts, and then every second while replicas of an earlier version may still keep
//! requests (a rolling upgrade on a shared store), each such request is read by the gRPC
//! layer's reader, written in core's form and moved to where this version's scheduler
//! takes it. Its id's claim is untouched: the message still leaves exactly once, and
//! the earlier version never takes a request in a form it cannot read.

use std::sync::Arc;

use tokio::sync::watch;

use crate::core::domain::Priority;
use crate::core::periodic::Periodic;
use crate::core::ports::store::{Store, StoreError};
use crate::core::schedule::{LOOK_EVERY, kept};
use crate::transport::grpc::schedule::read_earlier_form;

/// Requests moved per look at the store.
const GROUP: u32 = 500;

/// Moves the requests earlier versions kept until `stop` turns true.
pub async fn run(store: Arc<dyn Store>, stop: watch::Receiver<bool>) {
    let mut every = Periodic::new(LOOK_EVERY, stop);
    while every.next().await {
        match move_earlier(store.as_ref()).await {
            Ok(0) => {}
            Ok(moved) => tracing::info!(
                moved,
                "scheduled messages of an earlier version moved into this version's form"
            ),
            Err(e) => {
                tracing::warn!(error = %e, "cannot move the scheduled messages of an earlier version; trying again shortly")
            }
        }
    }
}

/// Moves every request earlier versions kept into core's form: how many it moved.
pub async fn move_earlier(store: &dyn Store) -> Result<usize, StoreError> {
    let mut moved = 0;
    loop {
        let group = store.earlier_scheduled(GROUP).await?;
        let last = group.len() < GROUP as usize;
        for request in group {
            let payload = match read_earlier_form(&request.payload)
                .and_then(|op| kept::encode(&op, Priority::Normal))
            {
                Ok(payload) => payload,
                // Moved as it was: core cannot read it and refuses it as it leaves (its
                // claim released, a final REJECTED event), as the earlier version would.
                Err(e) => {
                    tracing::warn!(client_id = request.id.get(), error = %e, "a scheduled message of an earlier version no longer reads; it will be refused as it leaves");
                    request.payload
                }
            };
            if store.move_earlier_scheduled(request.id, payload).await? {
                moved += 1;
            }
        }
        if last {
            return Ok(moved);
        }
    }
}
