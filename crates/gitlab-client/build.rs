//! Registers `schemas/gitlab.graphql` for cynic's derives, which check every query against it.

fn main() {
    cynic_codegen::register_schema("gitlab")
        .from_sdl_file("../../schemas/gitlab.graphql")
        .expect("schemas/gitlab.graphql is missing: run `cargo xtask schema gitlab`")
        .as_default()
        .expect("schemas/gitlab.graphql does not parse: run `cargo xtask schema gitlab`");
}
