//! Compiles the `.proto` contract with protox (pure Rust, no `protoc`) and
//! generates the tonic code and the descriptor set reflection serves.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/waft/v1/types.proto",
        "proto/waft/v1/frontend.proto",
        "proto/waft/v1/controller.proto",
        "proto/waft/v1/hsc.proto",
    ];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(protos, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("waft_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}
