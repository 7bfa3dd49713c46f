//! What the gRPC port serves: msgw's seven services, health and reflection, and
//! msgw's health status (also a flag for the admin listener's `/readyz`).

use std::sync::Arc;

use tokio::sync::watch;
use tonic::service::Routes;
use tonic_health::{ServingStatus, server::HealthReporter};

use super::{
    Account, Events, FraudGuard, MAX_REQUEST_BYTES, Messaging, SuppressionList, Templates,
    Verification,
};
use crate::core::events::EventLog;
use crate::core::optout::Suppressions;
use crate::core::verify::Verifier;
use crate::transport::proto::{
    self, account_service_server::AccountServiceServer, event_service_server::EventServiceServer,
    fraud_guard_service_server::FraudGuardServiceServer,
    messaging_service_server::MessagingServiceServer,
    suppression_service_server::SuppressionServiceServer,
    template_service_server::TemplateServiceServer,
    verification_service_server::VerificationServiceServer,
};

/// The services msgw serves, as health check names.
const SERVICES: [&str; 7] = [
    "msgw.v1.MessagingService",
    "msgw.v1.AccountService",
    "msgw.v1.TemplateService",
    "msgw.v1.EventService",
    "msgw.v1.VerificationService",
    "msgw.v1.FraudGuardService",
    "msgw.v1.SuppressionService",
];

/// Largest request of the services that need no token (health, reflection): a
/// service name or a symbol.
const OPEN_REQUEST_BYTES: usize = 16 * 1024;

/// msgw's health: the gRPC health service, and the same as a flag.
#[derive(Clone)]
pub struct Health {
    reporter: HealthReporter,
    ready: Arc<watch::Sender<bool>>,
}

impl Health {
    /// Sets the status of the whole server (`""`) and of each msgw service.
    pub async fn set(&self, status: ServingStatus) {
        self.ready.send_replace(status == ServingStatus::Serving);
        self.reporter.set_service_status("", status).await;
        for service in SERVICES {
            self.reporter.set_service_status(service, status).await;
        }
    }

    /// Follows the status: true while SERVING.
    pub fn ready(&self) -> watch::Receiver<bool> {
        self.ready.subscribe()
    }
}

/// Everything the gRPC port serves, and the health it reports (not serving yet).
pub fn routes(
    scheduler: Arc<crate::core::schedule::Scheduler>,
    queries: Arc<crate::core::queries::Queries>,
    events: Arc<EventLog>,
    verifier: Verifier,
    suppressions: Suppressions,
) -> Result<(Routes, Health), tonic_reflection::server::Error> {
    let dispatcher = scheduler.dispatcher().clone();
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let health = Health {
        reporter,
        ready: Arc::new(watch::channel(false).0),
    };
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
    };
    // Health and reflection need no token: their requests are small, so a client
    // without one cannot make msgw buffer a large message.
    let routes = Routes::new(health_service.max_decoding_message_size(OPEN_REQUEST_BYTES))
        .add_service(
            reflection()
                .build_v1()?
                .max_decoding_message_size(OPEN_REQUEST_BYTES),
        )
        // grpcurl 1.8 speaks only v1alpha.
        .add_service(
            reflection()
                .build_v1alpha()?
                .max_decoding_message_size(OPEN_REQUEST_BYTES),
        )
        .add_service(
            MessagingServiceServer::new(Messaging::new(
                scheduler,
                queries.clone(),
                events.clone(),
                verifier.numbers().clone(),
            ))
            .max_decoding_message_size(MAX_REQUEST_BYTES),
        )
        .add_service(
            AccountServiceServer::new(Account::new(queries))
                .max_decoding_message_size(MAX_REQUEST_BYTES),
        )
        .add_service(
            TemplateServiceServer::new(Templates::new(dispatcher))
                .max_decoding_message_size(MAX_REQUEST_BYTES),
        )
        .add_service(
            EventServiceServer::new(Events::new(events))
                .max_decoding_message_size(MAX_REQUEST_BYTES),
        )
        .add_service(
            FraudGuardServiceServer::new(FraudGuard::new(verifier.clone()))
                .max_decoding_message_size(MAX_REQUEST_BYTES),
        )
        .add_service(
            VerificationServiceServer::new(Verification::new(verifier))
                .max_decoding_message_size(MAX_REQUEST_BYTES),
        )
        .add_service(
            SuppressionServiceServer::new(SuppressionList::new(suppressions))
                .max_decoding_message_size(MAX_REQUEST_BYTES),
        );
    Ok((routes, health))
}
