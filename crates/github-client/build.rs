//! Registers `schemas/github.graphql` for cynic's derives, which check every query against it.

fn main() {
    cynic_codegen::register_schema("github")
        .from_sdl_file("../../schemas/github.graphql")
        .expect("schemas/github.graphql is missing: run `cargo xtask schema github`")
        .as_default()
        .expect("schemas/github.graphql does not parse: run `cargo xtask schema github`");
}
