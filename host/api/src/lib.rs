//! Waft's gRPC API.

/// The generated code of package `waft.v1`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("waft.v1");

    /// The descriptor set of every Waft service, for reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/waft_descriptor.bin"));
}
