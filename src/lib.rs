//! msgw: a typed gRPC facade for a multi-channel messaging gateway whose only
//! interface is one JSON-over-HTTP endpoint.

/// mimalloc: msgw allocates on one thread and frees on another all the time (a
/// request's buffers, the envelope's rows, the answers), where glibc's allocator
/// falls back to its locked bins.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// The layers (docs/layout.md): transport calls core, core calls the adapters, and
// process starts them all; the sandbox stands in for the gateway.
pub mod adapters;
pub mod core;
pub mod process;
pub mod sandbox;
pub mod transport;
