//! What core needs of the world, declared by core: the store ([`store::Store`]) and the
//! gateway ([`gateway::Gateway`]). `adapters/` implements them; `process/` hands the
//! implementations to core at start.

pub(crate) mod gateway;
pub mod store;
