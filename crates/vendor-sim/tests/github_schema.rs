//! The simulator serves GitHub's and GitLab's schemas, as far as the clients read them (the
//! committed `schemas/github.graphql` and `schemas/gitlab.graphql`), with the same names and
//! types, so the clients generated from those schemas fit it.

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
        // A schema defining a type twice: the first definition wins.
        out.entry(t.name.node.to_string()).or_insert(Shape {
            kind,
            implements,
            members,
        });
    }
    out
}

#[test]
fn served_schema_matches_githubs_wherever_the_client_reads_it() {
    // Only what the repository holds: the committed schema, which `cargo xtask schema github`
    // prunes from GitHub's to what the client selects and which the client is generated from.
    // So every type, field and argument in it must be served here with GitHub's type, and every
    // enum with GitHub's values; what the simulator serves beyond it no client query reaches.
    let vendor = shapes(include_str!("../../../schemas/github.graphql"));
    assert!(vendor.contains_key("Repository") && vendor.contains_key("PullRequest"));
    let problems = differences(&vendor, &vendor_sim::github::sdl(), "GitHub");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn served_schema_matches_gitlabs_wherever_the_client_reads_it() {
    // The same check against the committed `schemas/gitlab.graphql` (supplement included).
    let vendor = shapes(include_str!("../../../schemas/gitlab.graphql"));
    assert!(vendor.contains_key("Group") && vendor.contains_key("MergeRequest"));
    let problems = differences(&vendor, &vendor_sim::gitlab::sdl(), "GitLab");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Where the simulator's SDL `ours` differs from the committed contract `vendor`.
fn differences(vendor: &HashMap<String, Shape>, ours: &str, at: &str) -> Vec<String> {
    let ours = shapes(ours);
    let builtin = ["String", "Int", "Float", "Boolean", "ID"];
    let mut problems = Vec::new();
    for (name, theirs) in vendor {
        if builtin.contains(&name.as_str()) || name.starts_with("__") {
            continue;
        }
        let Some(shape) = ours.get(name) else {
            problems.push(format!("type {name} is not served here"));
            continue;
        };
        if theirs.kind != shape.kind {
            problems.push(format!(
                "{name} is a {} here, a {} at {at}",
                shape.kind, theirs.kind
            ));
        }
        // The pruned schema keeps a kept interface's fields on every type implementing it, for
        // validity; where the simulator does not declare that interface, the client reaches
        // neither the interface nor those fields through it, so they are not required here.
        let via_undeclared: Vec<&String> = theirs
            .implements
            .iter()
            .filter(|i| !shape.implements.contains(i))
            .filter_map(|i| vendor.get(i))
            .flat_map(|iface| iface.members.keys())
            .collect();
        for i in &shape.implements {
            if vendor.contains_key(i) && !theirs.implements.contains(i) {
                problems.push(format!("{name} implements {i} only here"));
            }
        }
        if shape.kind == "enum" {
            let mut a: Vec<_> = shape.members.keys().collect();
            let mut b: Vec<_> = theirs.members.keys().collect();
            a.sort();
            b.sort();
            if a != b {
                problems.push(format!("enum {name}: {a:?} here, {b:?} at {at}"));
            }
            continue;
        }
        for (field, (their_ty, their_args)) in &theirs.members {
            let Some((ty, args)) = shape.members.get(field) else {
                if !via_undeclared.contains(&field) {
                    problems.push(format!("{name}.{field} is not served here"));
                }
                continue;
            };
            if ty != their_ty {
                problems.push(format!("{name}.{field}: {ty} here, {their_ty} at {at}"));
            }
            for (arg, their_arg_ty) in their_args {
                match args.get(arg) {
                    Some(t) if t == their_arg_ty => {}
                    Some(t) => problems.push(format!(
                        "{name}.{field}({arg}): {t} here, {their_arg_ty} at {at}"
                    )),
                    None => problems.push(format!("{name}.{field}({arg}) is not served here")),
                }
            }
        }
    }
    problems.sort();
    problems
}
