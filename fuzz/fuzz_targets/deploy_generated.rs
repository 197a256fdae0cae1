//! The deploy path with generated lambdas: wasm-smith writes a core module
//! with exactly the exports and (a subset of) the imports of a Waft lambda
//! — `handle`, `cabi_realloc`, its memory, the host functions — and
//! arbitrary code inside; wit-component wraps it into a component of the
//! `lambda` world, of the current contract or of the first (0.1.0), whose
//! host calls the runtime converts. Such a component passes every check a deploy makes, so
//! it reaches instantiation and a run under tight limits, where it may do
//! anything a guest can: trap, loop, grow memory, call the host with
//! garbage pointers, return a malformed outcome. The host must answer with
//! an outcome every time.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use wit_component::{ComponentEncoder, StringEncoding, dummy_module, embed_component_metadata};
use wit_parser::{ManglingAndAbi, Resolve, WorldId};

/// A `lambda` world, and a core module with its exports and imports.
struct Shape {
    resolve: Resolve,
    world: WorldId,
    template: Vec<u8>,
}

/// The `lambda` world of each version of the contract, newest first (the
/// current in `wit/`, released ones in `wit/released/`).
fn shapes() -> &'static [Shape; 2] {
    static SHAPES: OnceLock<[Shape; 2]> = OnceLock::new();
    SHAPES.get_or_init(|| {
        let wit = concat!(env!("CARGO_MANIFEST_DIR"), "/../wit");
        [
            (wit.to_owned(), "waft:lambda/lambda@0.2.3"),
            (
                format!("{wit}/released/lambda-0.1.0"),
                "waft:lambda/lambda@0.1.0",
            ),
        ]
        .map(|(path, name)| {
            let mut resolve = Resolve::default();
            let (package, _) = resolve.push_path(path).expect("the WIT parses");
            let world = resolve
                .select_world(&[package], Some(name))
                .expect("the lambda world");
            let template = dummy_module(&resolve, world, ManglingAndAbi::Standard32);
            Shape {
                resolve,
                world,
                template,
            }
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let mut input = Unstructured::new(data);
    let Ok(first) = input.arbitrary::<bool>() else {
        return;
    };
    let shape = &shapes()[usize::from(!first)];
    let config = wasm_smith::Config {
        exports: Some(shape.template.clone()),
        available_imports: Some(shape.template.clone()),
        // The core features the canonical ABI lowers to.
        gc_enabled: false,
        threads_enabled: false,
        shared_everything_threads_enabled: false,
        exceptions_enabled: false,
        memory64_enabled: false,
        custom_page_sizes_enabled: false,
        max_memories: 1,
        max_memory32_bytes: 32 << 20,
        max_instructions: 2_000,
        ..wasm_smith::Config::default()
    };
    let Ok(module) = wasm_smith::Module::new(config, &mut input) else {
        return;
    };
    let mut core = module.to_bytes();
    if embed_component_metadata(&mut core, &shape.resolve, shape.world, StringEncoding::UTF8)
        .is_err()
    {
        return;
    }
    let mut encoder = ComponentEncoder::default();
    if encoder.validate(true).module(&core).is_err() {
        return;
    }
    let Ok(component) = encoder.encode() else {
        return;
    };
    waft_fuzz::deploy_and_run(&component);
});
