//! msgw: a typed gRPC facade for a multi-channel messaging gateway whose only
//! interface is one JSON-over-HTTP endpoint.

/// mimalloc: msgw allocates on one thread and frees on another all the time (a
/// request's buffers, the envelope's rows, the answers), where glibc's allocator
/// falls back to its locked bins.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// The layers (docs/layout.md), bottom first: base (metrics, option values); core (the
// domain, its decisions and its ports); adapters (the gateway, the store) and transport
// (gRPC, webhooks, admin), which implement and call core's ports; the sandbox; process,
// which starts and wires them all. No layer names one above it (tests/layers.rs).
pub mod adapters;
pub mod base;
pub mod core;
pub mod process;
pub mod sandbox;
pub mod transport;
