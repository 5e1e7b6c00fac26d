//! Every type, field, argument and enum value the simulator serves exists in GitHub's published
//! schema with the same name and type, so a client generated from that schema fits it.

use std::collections::HashMap;

use async_graphql::parser::parse_schema;
use async_graphql::parser::types::{TypeKind, TypeSystemDefinition};

/// A type's shape, in text: kind, implemented interfaces, and members (field → type with
/// arguments, enum value, or input field).
struct Shape {
    kind: &'static str,
    implements: Vec<String>,
    members: HashMap<String, (String, HashMap<String, String>)>,
}

fn shapes(sdl: &str) -> HashMap<String, Shape> {
    let doc = parse_schema(sdl).expect("schema parses");
    let mut out = HashMap::new();
    for def in doc.definitions {
        let TypeSystemDefinition::Type(t) = def else {
            continue;
        };
        let t = t.node;
        let field_map = |fields: &[async_graphql::parser::Positioned<
            async_graphql::parser::types::FieldDefinition,
        >]| {
            fields
                .iter()
                .map(|f| {
                    let args = f
                        .node
                        .arguments
                        .iter()
                        .map(|a| (a.node.name.node.to_string(), a.node.ty.node.to_string()))
                        .collect();
                    (
                        f.node.name.node.to_string(),
                        (f.node.ty.node.to_string(), args),
                    )
                })
                .collect()
        };
        let (kind, implements, members) = match &t.kind {
            TypeKind::Scalar => ("scalar", vec![], HashMap::new()),
            TypeKind::Object(o) => (
                "type",
                o.implements.iter().map(|i| i.node.to_string()).collect(),
                field_map(&o.fields),
            ),
            TypeKind::Interface(i) => (
                "interface",
                i.implements.iter().map(|i| i.node.to_string()).collect(),
                field_map(&i.fields),
            ),
            TypeKind::Union(_) => ("union", vec![], HashMap::new()),
            TypeKind::Enum(e) => (
                "enum",
                vec![],
                e.values
                    .iter()
                    .map(|v| {
                        (
                            v.node.value.node.to_string(),
                            (String::new(), HashMap::new()),
                        )
                    })
                    .collect(),
            ),
            TypeKind::InputObject(i) => (
                "input",
                vec![],
                i.fields
                    .iter()
                    .map(|f| {
                        (
                            f.node.name.node.to_string(),
                            (f.node.ty.node.to_string(), HashMap::new()),
                        )
                    })
                    .collect(),
            ),
        };
        // The vendor file defines a few types twice; the first definition wins.
        out.entry(t.name.node.to_string()).or_insert(Shape {
            kind,
            implements,
            members,
        });
    }
    out
}

#[test]
fn served_schema_is_a_subset_of_githubs() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/vendor/github-schema.graphql"
    );
    let vendor = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("GitHub's schema is expected at {path}: {e}"));
    let vendor = shapes(&vendor);
    let ours = shapes(&vendor_sim::github::sdl());
    assert!(ours.contains_key("Repository") && ours.contains_key("PullRequest"));
    let builtin = ["String", "Int", "Float", "Boolean", "ID"];
    let mut problems = Vec::new();
    for (name, shape) in &ours {
        if builtin.contains(&name.as_str()) || name.starts_with("__") {
            continue;
        }
        let Some(theirs) = vendor.get(name) else {
            problems.push(format!("type {name} is not in GitHub's schema"));
            continue;
        };
        if theirs.kind != shape.kind {
            problems.push(format!(
                "{name} is a {} here, a {} at GitHub",
                shape.kind, theirs.kind
            ));
        }
        for i in &shape.implements {
            if !theirs.implements.contains(i) {
                problems.push(format!("{name} implements {i} only here"));
            }
        }
        if shape.kind == "enum" {
            let mut a: Vec<_> = shape.members.keys().collect();
            let mut b: Vec<_> = theirs.members.keys().collect();
            a.sort();
            b.sort();
            if a != b {
                problems.push(format!("enum {name}: {a:?} here, {b:?} at GitHub"));
            }
            continue;
        }
        for (field, (ty, args)) in &shape.members {
            let Some((their_ty, their_args)) = theirs.members.get(field) else {
                problems.push(format!("{name}.{field} is not in GitHub's schema"));
                continue;
            };
            if ty != their_ty {
                problems.push(format!("{name}.{field}: {ty} here, {their_ty} at GitHub"));
            }
            for (arg, arg_ty) in args {
                match their_args.get(arg) {
                    Some(t) if t == arg_ty => {}
                    Some(t) => problems.push(format!(
                        "{name}.{field}({arg}): {arg_ty} here, {t} at GitHub"
                    )),
                    None => problems.push(format!("{name}.{field}({arg}) is not at GitHub")),
                }
            }
        }
    }
    problems.sort();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
