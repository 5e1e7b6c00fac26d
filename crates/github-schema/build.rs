//! Registers `schemas/github.graphql` with cynic so the `schema` module can be generated from it.

fn main() {
    cynic_codegen::register_schema("github")
        .from_sdl_file("../../schemas/github.graphql")
        .expect("schemas/github.graphql is missing: run `cargo xtask schema github`")
        .as_default()
        .expect("schemas/github.graphql does not parse: run `cargo xtask schema github`");
}
