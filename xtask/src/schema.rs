//! `cargo xtask schema github|gitlab`: a vendor's published GraphQL schema, pruned to our contract.
//!
//! The vendors' schemas are huge (25-30k lines) and ship with defects (GitHub's duplicate field
//! definitions), so the build never reads them. This task reads one once, merges the project's
//! supplement when the vendor has one (GitLab: enum values newer than the shared copy), drops
//! the duplicates, keeps only what the query documents in `crates/<vendor>-client/queries/`
//! select (the fields, the arguments they pass or must pass, the types those reach), strips
//! descriptions, and writes `schemas/<vendor>.graphql`. The output depends on nothing but the
//! inputs, so re-running it changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};
use graphql_parser::query::{self as q, OperationDefinition, Selection, SelectionSet};
use graphql_parser::schema::{self as s, Definition, Type, TypeDefinition};

use crate::paths::Layout;

/// Where each vendor's files live, relative to the workspace root.
pub struct VendorPaths {
    /// The vendor's name in `cargo xtask schema <name>` and in the output's header.
    pub name: &'static str,
    /// The raw schema used when `--from` is not given: this file of the shared vendor copies
    /// (`shared/vendor/`, found by [`shared_vendor_file`]).
    pub vendor_file: &'static str,
    /// The folder of `.graphql` query documents that decide what is kept.
    pub queries: PathBuf,
    /// The project's own additions to the vendor schema (`extend enum` only), if any.
    pub supplement: Option<PathBuf>,
    /// The generated, committed schema.
    pub output: PathBuf,
}

/// The paths for GitHub.
pub fn github_paths(workspace_root: &Path) -> VendorPaths {
    VendorPaths {
        name: "github",
        vendor_file: "github-schema.graphql",
        queries: workspace_root.join("crates/github-client/queries"),
        supplement: None,
        output: workspace_root.join("schemas/github.graphql"),
    }
}

/// The paths for GitLab: the shared copy is GitLab 16.3; newer enum values come from the
/// project's supplement.
pub fn gitlab_paths(workspace_root: &Path) -> VendorPaths {
    VendorPaths {
        name: "gitlab",
        vendor_file: "gitlab-schema.graphql",
        queries: workspace_root.join("crates/gitlab-client/queries"),
        supplement: Some(workspace_root.join("schemas/gitlab-supplement.graphql")),
        output: workspace_root.join("schemas/gitlab.graphql"),
    }
}

/// Runs the task for `paths(root)`: reads the source (a file path or an http(s) URL), merges
/// the supplement, prunes, writes the output.
pub fn refresh(
    layout: &Layout,
    paths: fn(&Path) -> VendorPaths,
    from: Option<&str>,
) -> anyhow::Result<()> {
    let paths = paths(&layout.workspace_root);
    let raw = match from {
        Some(url) if url.starts_with("https://") || url.starts_with("http://") => fetch(url)?,
        Some(file) => read(Path::new(file))?,
        None => read(&shared_vendor_file(
            &layout.workspace_root,
            paths.vendor_file,
        )?)?,
    };
    let pruned = prune_vendor(&paths, &raw)?;
    let changed = std::fs::read_to_string(&paths.output).ok().as_deref() != Some(&pruned);
    if let Some(dir) = paths.output.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&paths.output, &pruned)
        .with_context(|| format!("writing {}", paths.output.display()))?;
    eprintln!(
        "xtask: {} {} ({} lines)",
        if changed { "wrote" } else { "unchanged:" },
        paths.output.display(),
        pruned.lines().count()
    );
    Ok(())
}

/// Finds `shared/vendor/<file>`. `shared/` sits beside the main checkout, so from a git
/// worktree (elsewhere on disk) `../shared` is not it: the places tried are beside the
/// workspace, beside the main checkout (git's common dir), and `shared/` in any parent.
pub(crate) fn shared_vendor_file(workspace_root: &Path, file: &str) -> anyhow::Result<PathBuf> {
    let tried = vendor_candidates(
        workspace_root,
        main_checkout(workspace_root).as_deref(),
        file,
    );
    if let Some(found) = tried.iter().find(|p| p.is_file()) {
        return Ok(found.clone());
    }
    let tried: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
    bail!(
        "no shared vendor copy of {file} (tried {}); pass --from FILE|URL",
        tried.join(", ")
    )
}

/// The places `shared/vendor/<file>` may be, in order, without repeats.
fn vendor_candidates(workspace_root: &Path, main: Option<&Path>, file: &str) -> Vec<PathBuf> {
    let beside = |checkout: &Path| checkout.join("../shared/vendor").join(file);
    let mut all = vec![beside(workspace_root)];
    all.extend(main.map(beside));
    all.extend(
        workspace_root
            .ancestors()
            .map(|dir| dir.join("shared/vendor").join(file)),
    );
    let mut unique: Vec<PathBuf> = Vec::new();
    for path in all.iter().map(|p| lexical(p)) {
        if !unique.contains(&path) {
            unique.push(path);
        }
    }
    unique
}

/// The main checkout of the repository `workspace_root` is in (a worktree's included): the
/// folder holding git's common dir. `None` when git cannot tell.
fn main_checkout(workspace_root: &Path) -> Option<PathBuf> {
    let out = Command::new("git")
        .arg("-C")
        .arg(workspace_root)
        .args(["rev-parse", "--git-common-dir"])
        .output()
        .ok()
        .filter(|out| out.status.success())?;
    let common = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    // Relative answers are relative to the directory git ran in.
    lexical(&workspace_root.join(common))
        .parent()
        .map(Path::to_path_buf)
}

/// `path` with `.` and `..` resolved by name (no symlinks followed).
fn lexical(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

pub(crate) fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// xtask has no HTTP client of its own; curl is on every developer machine and keeps xtask light.
pub(crate) fn fetch(url: &str) -> anyhow::Result<String> {
    let out = Command::new("curl")
        .args(["--fail", "--silent", "--show-error", "--location", url])
        .output()
        .context("could not run curl to fetch the schema (install curl or pass --from FILE)")?;
    ensure!(
        out.status.success(),
        "curl {url} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8(out.stdout).with_context(|| format!("{url} is not UTF-8"))
}

/// The query documents, in file-name order (the order does not change the output).
pub fn read_queries(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.retain(|p| p.extension().is_some_and(|ext| ext == "graphql"));
    files.sort();
    ensure!(
        !files.is_empty(),
        "no .graphql documents in {}",
        dir.display()
    );
    files.iter().map(|p| read(p)).collect()
}

/// Prunes `raw` for the vendor of `paths`: its supplement merged, its documents, its header.
pub fn prune_vendor(paths: &VendorPaths, raw: &str) -> anyhow::Result<String> {
    let queries = read_queries(&paths.queries)?;
    let supplement = paths.supplement.as_deref().map(read).transpose()?;
    let name = paths.name;
    let header = match name {
        "github" => "# GitHub's GraphQL schema".to_owned(),
        "gitlab" => {
            "# GitLab's GraphQL schema, with schemas/gitlab-supplement.graphql merged".to_owned()
        }
        other => format!("# {other}'s GraphQL schema"),
    };
    let header = format!(
        "{header}, pruned to what crates/{name}-client/queries/ select.\n\
         # Generated by `cargo xtask schema {name}`; do not edit by hand.\n\n"
    );
    prune_with(raw, supplement.as_deref(), &queries, &header)
}

/// The built-in scalars, which a schema never declares.
const BUILTIN_SCALARS: [&str; 5] = ["String", "Int", "Float", "Boolean", "ID"];

type Doc = s::Document<'static, String>;

/// Prunes the SDL `raw` to what `queries` select and prints it deterministically.
#[cfg(test)]
fn prune(raw: &str, queries: &[String]) -> anyhow::Result<String> {
    prune_with(raw, None, queries, "")
}

/// [`prune`] with a supplement merged first and `header` in front of the output.
fn prune_with(
    raw: &str,
    supplement: Option<&str>,
    queries: &[String],
    header: &str,
) -> anyhow::Result<String> {
    let mut doc: Doc = s::parse_schema::<String>(raw)
        .context("parsing the vendor schema")?
        .into_static();
    if let Some(supplement) = supplement {
        merge_supplement(&mut doc, supplement)?;
    }
    let schema = Schema::index(doc)?;
    let mut kept = Kept::default();
    for (i, text) in queries.iter().enumerate() {
        let query = q::parse_query::<String>(text)
            .with_context(|| format!("parsing query document #{i}"))?
            .into_static();
        kept.walk_document(&schema, &query)?;
    }
    kept.close_over_interfaces(&schema)?;
    Ok(format!("{header}{}", kept.render(&schema)?))
}

/// Appends a supplement's `extend enum` values to the vendor's enums. A value the vendor already
/// has is skipped, so a newer (introspected) schema that carries it merges to the same output;
/// an enum the vendor lacks, or any other kind of definition, is refused.
fn merge_supplement(doc: &mut Doc, supplement: &str) -> anyhow::Result<()> {
    let extra: Doc = s::parse_schema::<String>(supplement)
        .context("parsing the schema supplement")?
        .into_static();
    for def in extra.definitions {
        let Definition::TypeExtension(s::TypeExtension::Enum(ext)) = def else {
            bail!("the supplement may only hold `extend enum` definitions");
        };
        let target = doc
            .definitions
            .iter_mut()
            .find_map(|d| match d {
                Definition::TypeDefinition(TypeDefinition::Enum(e)) if e.name == ext.name => {
                    Some(e)
                }
                _ => None,
            })
            .with_context(|| {
                format!(
                    "the supplement extends enum {}, which the vendor schema lacks",
                    ext.name
                )
            })?;
        for value in ext.values {
            if !target.values.iter().any(|v| v.name == value.name) {
                target.values.push(value);
            }
        }
    }
    Ok(())
}

/// The vendor schema by type name, duplicates dropped.
struct Schema {
    types: BTreeMap<String, TypeDefinition<'static, String>>,
    query_root: String,
}

impl Schema {
    fn index(doc: Doc) -> anyhow::Result<Self> {
        let mut types = BTreeMap::new();
        let mut query_root = "Query".to_owned();
        for def in doc.definitions {
            match def {
                Definition::SchemaDefinition(sd) => {
                    if let Some(query) = sd.query {
                        query_root = query;
                    }
                }
                Definition::TypeDefinition(mut td) => {
                    dedupe_fields(&mut td)?;
                    let name = type_name(&td).to_owned();
                    ensure!(
                        types.insert(name.clone(), td).is_none(),
                        "type {name} is defined twice in the vendor schema"
                    );
                }
                // Extensions would change the types we prune; GitHub ships none.
                Definition::TypeExtension(_) => bail!("type extensions are not supported"),
                // Custom directives are dropped with their uses; @deprecated is built in.
                Definition::DirectiveDefinition(_) => {}
            }
        }
        Ok(Self { types, query_root })
    }

    fn get(&self, name: &str) -> anyhow::Result<&TypeDefinition<'static, String>> {
        self.types
            .get(name)
            .with_context(|| format!("type {name} is not in the vendor schema"))
    }

    fn field(&self, owner: &str, field: &str) -> anyhow::Result<&s::Field<'static, String>> {
        fields_of(self.get(owner)?)
            .with_context(|| format!("{owner} has no fields; cannot select {field}"))?
            .iter()
            .find(|f| f.name == field)
            .with_context(|| format!("{owner}.{field} is not in the vendor schema"))
    }
}

/// GitHub's schema defines some fields twice (`EnterpriseOwnerInfo.repositoryDeployKeySetting`);
/// codegen rejects that. Identical repeats are dropped; differing ones are an error.
fn dedupe_fields(td: &mut TypeDefinition<'static, String>) -> anyhow::Result<()> {
    let owner = type_name(td).to_owned();
    let fields = match td {
        TypeDefinition::Object(o) => &mut o.fields,
        TypeDefinition::Interface(i) => &mut i.fields,
        _ => return Ok(()),
    };
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut result = Vec::with_capacity(fields.len());
    for field in fields.drain(..) {
        let signature = field_signature(&field);
        match seen.get(&field.name) {
            None => {
                seen.insert(field.name.clone(), signature);
                result.push(field);
            }
            Some(first) => ensure!(
                *first == signature,
                "{owner}.{} is defined twice with different signatures",
                field.name
            ),
        }
    }
    *fields = result;
    Ok(())
}

/// A field's printed form without descriptions or positions, to compare repeats.
fn field_signature(field: &s::Field<'static, String>) -> String {
    let mut field = field.clone();
    field.description = None;
    for arg in &mut field.arguments {
        arg.description = None;
    }
    let args: Vec<String> = field.arguments.iter().map(|a| a.to_string()).collect();
    format!("{}({}): {}", field.name, args.join(", "), field.field_type)
}

fn type_name<'a>(td: &'a TypeDefinition<'static, String>) -> &'a str {
    match td {
        TypeDefinition::Scalar(t) => &t.name,
        TypeDefinition::Object(t) => &t.name,
        TypeDefinition::Interface(t) => &t.name,
        TypeDefinition::Union(t) => &t.name,
        TypeDefinition::Enum(t) => &t.name,
        TypeDefinition::InputObject(t) => &t.name,
    }
}

fn fields_of<'a>(
    td: &'a TypeDefinition<'static, String>,
) -> Option<&'a [s::Field<'static, String>]> {
    match td {
        TypeDefinition::Object(o) => Some(&o.fields),
        TypeDefinition::Interface(i) => Some(&i.fields),
        _ => None,
    }
}

fn implements_of<'a>(td: &'a TypeDefinition<'static, String>) -> &'a [String] {
    match td {
        TypeDefinition::Object(o) => &o.implements_interfaces,
        TypeDefinition::Interface(i) => &i.implements_interfaces,
        _ => &[],
    }
}

fn named<'a>(ty: &'a Type<'static, String>) -> &'a str {
    match ty {
        Type::NamedType(name) => name,
        Type::ListType(inner) | Type::NonNullType(inner) => named(inner),
    }
}

/// What survives the pruning.
#[derive(Default)]
struct Kept {
    /// Object and interface types, with the fields kept and, per field, the arguments kept.
    composite: BTreeMap<String, BTreeMap<String, BTreeSet<String>>>,
    /// Scalars, enums, input objects and unions, kept whole.
    whole: BTreeSet<String>,
}

impl Kept {
    fn walk_document(
        &mut self,
        schema: &Schema,
        doc: &q::Document<'static, String>,
    ) -> anyhow::Result<()> {
        let fragments: BTreeMap<&str, &q::FragmentDefinition<'static, String>> = doc
            .definitions
            .iter()
            .filter_map(|d| match d {
                q::Definition::Fragment(f) => Some((f.name.as_str(), f)),
                q::Definition::Operation(_) => None,
            })
            .collect();
        for def in &doc.definitions {
            let q::Definition::Operation(op) = def else {
                continue;
            };
            let (variables, selection) = match op {
                OperationDefinition::Query(query) => {
                    (&query.variable_definitions, &query.selection_set)
                }
                OperationDefinition::SelectionSet(set) => (&Vec::new(), set),
                OperationDefinition::Mutation(_) | OperationDefinition::Subscription(_) => {
                    bail!("only queries are supported in the contract")
                }
            };
            for var in variables {
                self.keep_input(schema, named(&var.var_type))?;
            }
            let root = schema.query_root.clone();
            self.reach_composite(schema, &root)?;
            self.walk(schema, &fragments, &root, selection)?;
        }
        Ok(())
    }

    fn walk(
        &mut self,
        schema: &Schema,
        fragments: &BTreeMap<&str, &q::FragmentDefinition<'static, String>>,
        owner: &str,
        set: &SelectionSet<'static, String>,
    ) -> anyhow::Result<()> {
        for item in &set.items {
            match item {
                Selection::Field(field) => {
                    if field.name == "__typename" {
                        continue;
                    }
                    let used: Vec<&str> = field.arguments.iter().map(|(n, _)| n.as_str()).collect();
                    let def = schema.field(owner, &field.name)?;
                    for arg in &used {
                        ensure!(
                            def.arguments.iter().any(|a| a.name == *arg),
                            "{owner}.{} has no argument {arg}",
                            field.name
                        );
                    }
                    self.keep_field(schema, owner, &field.name, &used)?;
                    let target = named(&def.field_type).to_owned();
                    if !field.selection_set.items.is_empty() {
                        self.walk(schema, fragments, &target, &field.selection_set)?;
                    }
                }
                Selection::InlineFragment(fragment) => {
                    let on = match &fragment.type_condition {
                        Some(q::TypeCondition::On(name)) => name.clone(),
                        None => owner.to_owned(),
                    };
                    self.reach_composite(schema, &on)?;
                    self.walk(schema, fragments, &on, &fragment.selection_set)?;
                }
                Selection::FragmentSpread(spread) => {
                    let fragment = fragments
                        .get(spread.fragment_name.as_str())
                        .with_context(|| format!("unknown fragment {}", spread.fragment_name))?;
                    let q::TypeCondition::On(on) = &fragment.type_condition;
                    self.reach_composite(schema, on)?;
                    self.walk(schema, fragments, on, &fragment.selection_set)?;
                }
            }
        }
        Ok(())
    }

    /// Keeps `owner.field` with the arguments `used` plus every required one, and reaches the
    /// types of both. Returns whether anything new was kept.
    fn keep_field(
        &mut self,
        schema: &Schema,
        owner: &str,
        field: &str,
        used: &[&str],
    ) -> anyhow::Result<bool> {
        let def = schema.field(owner, field)?;
        let required = def
            .arguments
            .iter()
            .filter(|a| matches!(a.value_type, Type::NonNullType(_)) && a.default_value.is_none())
            .map(|a| a.name.as_str());
        let wanted: BTreeSet<String> = used
            .iter()
            .copied()
            .chain(required)
            .map(str::to_owned)
            .collect();
        let args = self
            .composite
            .entry(owner.to_owned())
            .or_default()
            .entry(field.to_owned());
        let is_new = matches!(args, std::collections::btree_map::Entry::Vacant(_));
        let args = args.or_default();
        let before = args.len();
        args.extend(wanted);
        let grew = is_new || args.len() != before;
        let arg_types: Vec<String> = def
            .arguments
            .iter()
            .filter(|a| args.contains(&a.name))
            .map(|a| named(&a.value_type).to_owned())
            .collect();
        for ty in arg_types {
            self.keep_input(schema, &ty)?;
        }
        let target = named(&def.field_type).to_owned();
        match schema.types.get(&target) {
            Some(TypeDefinition::Object(_) | TypeDefinition::Interface(_)) => {
                self.reach_composite(schema, &target)?
            }
            Some(TypeDefinition::Union(u)) => {
                self.whole.insert(target.clone());
                let members = u.types.clone();
                for member in members {
                    self.reach_composite(schema, &member)?;
                }
            }
            _ => self.keep_leaf(schema, &target)?,
        }
        Ok(grew)
    }

    fn reach_composite(&mut self, schema: &Schema, name: &str) -> anyhow::Result<()> {
        ensure!(
            fields_of(schema.get(name)?).is_some(),
            "{name} is not an object or interface type"
        );
        self.composite.entry(name.to_owned()).or_default();
        Ok(())
    }

    fn keep_leaf(&mut self, schema: &Schema, name: &str) -> anyhow::Result<()> {
        if BUILTIN_SCALARS.contains(&name) {
            return Ok(());
        }
        match schema.get(name)? {
            TypeDefinition::Scalar(_) | TypeDefinition::Enum(_) => {
                self.whole.insert(name.to_owned());
                Ok(())
            }
            _ => bail!("{name} is selected like a leaf but is not a scalar or enum"),
        }
    }

    /// Variable and argument types: input objects are kept whole, with all they reach.
    fn keep_input(&mut self, schema: &Schema, name: &str) -> anyhow::Result<()> {
        if BUILTIN_SCALARS.contains(&name) || self.whole.contains(name) {
            return Ok(());
        }
        match schema.get(name)? {
            TypeDefinition::Scalar(_) | TypeDefinition::Enum(_) => {
                self.whole.insert(name.to_owned());
            }
            TypeDefinition::InputObject(input) => {
                self.whole.insert(name.to_owned());
                for field in &input.fields {
                    self.keep_input(schema, named(&field.value_type))?;
                }
            }
            _ => bail!("{name} is used as an input but is not an input type"),
        }
        Ok(())
    }

    /// A kept type that implements a kept interface must carry that interface's kept fields, and
    /// an interface must carry the fields its kept implementers select through it (a fragment
    /// `... on Repository` under `node` keeps `Node.id` because `Repository.id` is kept).
    fn close_over_interfaces(&mut self, schema: &Schema) -> anyhow::Result<()> {
        loop {
            let mut grew = false;
            let pairs: Vec<(String, String)> = self
                .composite
                .keys()
                .flat_map(|owner| {
                    let interfaces = schema
                        .types
                        .get(owner)
                        .map(implements_of)
                        .unwrap_or_default();
                    interfaces
                        .iter()
                        .filter(|i| self.composite.contains_key(*i))
                        .map(|i| (owner.clone(), i.clone()))
                        .collect::<Vec<_>>()
                })
                .collect();
            for (owner, interface) in pairs {
                let down: Vec<(String, Vec<String>)> = self.composite[&interface]
                    .iter()
                    .map(|(f, args)| (f.clone(), args.iter().cloned().collect()))
                    .collect();
                for (field, args) in down {
                    same_field_type(schema, &interface, &owner, &field)?;
                    let used: Vec<&str> = args.iter().map(String::as_str).collect();
                    grew |= self.keep_field(schema, &owner, &field, &used)?;
                }
                let interface_fields = fields_of(schema.get(&interface)?).unwrap_or_default();
                let up: Vec<String> = self.composite[&owner]
                    .keys()
                    .filter(|f| interface_fields.iter().any(|d| d.name == **f))
                    .cloned()
                    .collect();
                for field in up {
                    same_field_type(schema, &interface, &owner, &field)?;
                    grew |= self.keep_field(schema, &interface, &field, &[])?;
                }
            }
            if !grew {
                return Ok(());
            }
        }
    }

    fn render(&self, schema: &Schema) -> anyhow::Result<String> {
        let mut names: BTreeSet<&String> = self.composite.keys().collect();
        names.extend(self.whole.iter());
        let mut definitions = Vec::new();
        if schema.query_root != "Query" {
            definitions.push(Definition::SchemaDefinition(s::SchemaDefinition {
                position: Default::default(),
                directives: Vec::new(),
                query: Some(schema.query_root.clone()),
                mutation: None,
                subscription: None,
            }));
        }
        for name in names {
            let mut td = schema.get(name)?.clone();
            match &mut td {
                TypeDefinition::Object(o) => {
                    let kept = &self.composite[name];
                    ensure!(
                        !kept.is_empty(),
                        "type {name} is reached but selects no field"
                    );
                    o.description = None;
                    o.directives.clear();
                    o.implements_interfaces
                        .retain(|i| self.composite.contains_key(i));
                    o.fields.retain(|f| kept.contains_key(&f.name));
                    for field in &mut o.fields {
                        prune_field(field, &kept[&field.name]);
                    }
                }
                TypeDefinition::Interface(i) => {
                    let kept = &self.composite[name];
                    ensure!(
                        !kept.is_empty(),
                        "interface {name} is reached but selects no field"
                    );
                    i.description = None;
                    i.directives.clear();
                    i.implements_interfaces
                        .retain(|x| self.composite.contains_key(x));
                    i.fields.retain(|f| kept.contains_key(&f.name));
                    for field in &mut i.fields {
                        prune_field(field, &kept[&field.name]);
                    }
                }
                TypeDefinition::Union(u) => {
                    u.description = None;
                    u.directives.clear();
                    u.types.retain(|t| self.composite.contains_key(t));
                }
                TypeDefinition::Enum(e) => {
                    e.description = None;
                    e.directives.clear();
                    for value in &mut e.values {
                        value.description = None;
                        value.directives.retain(is_builtin_directive);
                    }
                }
                TypeDefinition::InputObject(input) => {
                    input.description = None;
                    input.directives.clear();
                    for field in &mut input.fields {
                        strip_input_value(field);
                    }
                }
                TypeDefinition::Scalar(scalar) => {
                    scalar.description = None;
                    scalar.directives.clear();
                }
            }
            definitions.push(Definition::TypeDefinition(td));
        }
        Ok(s::Document { definitions }.to_string())
    }
}

/// Pruning across an interface only works where the interface and its implementer declare the
/// same type for the field; a covariant field would need its own subset and GitHub has none we use.
fn same_field_type(
    schema: &Schema,
    interface: &str,
    owner: &str,
    field: &str,
) -> anyhow::Result<()> {
    let declared = named(&schema.field(interface, field)?.field_type);
    let actual = named(&schema.field(owner, field)?.field_type);
    let composite = schema.types.get(actual).and_then(fields_of).is_some();
    ensure!(
        declared == actual || !composite,
        "{owner}.{field} ({actual}) narrows {interface}.{field} ({declared}); pruning cannot split it"
    );
    Ok(())
}

fn prune_field(field: &mut s::Field<'static, String>, args: &BTreeSet<String>) {
    field.description = None;
    field.directives.retain(is_builtin_directive);
    field.arguments.retain(|a| args.contains(&a.name));
    for arg in &mut field.arguments {
        strip_input_value(arg);
    }
}

fn strip_input_value(value: &mut s::InputValue<'static, String>) {
    value.description = None;
    value.directives.retain(is_builtin_directive);
}

/// Only `@deprecated` survives: the vendor's own directives are not part of our contract.
fn is_builtin_directive(directive: &s::Directive<'static, String>) -> bool {
    directive.name == "deprecated"
}

#[cfg(test)]
mod tests {
    use super::*;

    const SDL: &str = r#"
"""The root"""
type Query implements Node {
  id: ID!
  node(id: ID!): Node
  thing(name: String!, order: Order, unused: Int, gone: Filter): Thing
  other: Int
}
"Anything with an id"
interface Node { id: ID! }
interface Named { name: String! }
type Thing implements Node & Named {
  id: ID!
  name: String!
  name: String!
  kind: Kind @deprecated(reason: "no")
  when: DateTime @custom
  secret: String
}
enum Kind { A B }
enum Dir { ASC DESC }
input Order { field: Kind! direction: Dir! }
input Filter { since: DateTime }
scalar DateTime
scalar Unused
directive @custom on FIELD_DEFINITION
"#;

    const QUERY: &str = r#"
query Q($name: String!) {
  thing(name: $name, order: {field: A, direction: ASC}) { name kind when }
  node(id: "x") { ... on Thing { id } }
}
"#;

    fn pruned() -> String {
        prune(SDL, &[QUERY.to_owned()]).unwrap()
    }

    #[test]
    fn keeps_only_what_the_documents_select() {
        let out = pruned();
        for expected in [
            "thing(name: String!, order: Order): Thing",
            "type Thing implements Node {",
            "kind: Kind @deprecated(reason: \"no\")",
            "input Order",
            "enum Dir",
            "scalar DateTime",
            "interface Node",
        ] {
            assert!(out.contains(expected), "missing {expected:?} in\n{out}");
        }
        for dropped in [
            "secret", "other", "unused", "Filter", "Unused", "Named", "@custom", "The root",
            "Anything",
        ] {
            assert!(!out.contains(dropped), "kept {dropped:?} in\n{out}");
        }
    }

    #[test]
    fn fragments_keep_interface_fields_consistent() {
        let out = pruned();
        // Node.id comes from the fragment on Thing; Query implements Node, so it keeps id too.
        assert!(out.contains("interface Node {\n  id: ID!\n}"), "{out}");
        assert!(
            out.contains("type Query implements Node {\n  id: ID!"),
            "{out}"
        );
    }

    #[test]
    fn identical_duplicate_fields_are_dropped_and_conflicting_ones_refused() {
        let out = pruned();
        assert_eq!(out.matches("name: String!\n").count(), 1, "{out}");
        let conflicting = SDL.replacen(
            "  name: String!\n  name: String!",
            "  name: String!\n  name: Int",
            1,
        );
        let err = prune(&conflicting, &[QUERY.to_owned()]).unwrap_err();
        assert!(err.to_string().contains("different signatures"), "{err:#}");
    }

    #[test]
    fn unknown_fields_in_a_document_are_refused() {
        let err = prune(SDL, &["{ thing(name: \"x\") { nope } }".to_owned()]).unwrap_err();
        assert!(err.to_string().contains("Thing.nope"), "{err:#}");
    }

    #[test]
    fn rerunning_is_byte_for_byte_stable_and_a_fixpoint() {
        let first = pruned();
        assert_eq!(first, pruned());
        // The pruned output, pruned again with the same documents, is itself.
        assert_eq!(prune(&first, &[QUERY.to_owned()]).unwrap(), first);
    }

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_path_buf()
    }

    /// The committed GitHub schema is a fixpoint of the task over its own output, so a query
    /// document selecting something it lacks (or no longer selecting something it keeps) fails
    /// here. Only committed files are read: a user's clone has no vendor copy.
    #[test]
    fn committed_github_schema_is_up_to_date_and_stable() {
        let paths = github_paths(&root());
        let committed = std::fs::read_to_string(&paths.output).unwrap();
        let again = prune_vendor(&paths, &committed).unwrap();
        assert!(
            again == committed,
            "schemas/github.graphql is stale: run `cargo xtask schema github`"
        );
        assert_eq!(prune_vendor(&paths, &again).unwrap(), again);
    }

    /// The committed GitLab schema is a fixpoint of the task over its own output: a query
    /// document selecting something it lacks, one no longer selecting something it keeps, or a
    /// supplement value it misses all make this fail. (The check needs only committed files.)
    #[test]
    fn committed_gitlab_schema_matches_the_documents_and_the_supplement() {
        let paths = gitlab_paths(&root());
        let committed = std::fs::read_to_string(&paths.output).unwrap();
        let again = prune_vendor(&paths, &committed).unwrap();
        assert!(
            again == committed,
            "schemas/gitlab.graphql is stale: run `cargo xtask schema gitlab`"
        );
        assert_eq!(prune_vendor(&paths, &again).unwrap(), again);
        // The selected fields CE lacks must never enter the contract.
        assert!(!committed.contains("approvalsRequired"), "{committed}");
        for value in [
            "REQUESTED_CHANGES",
            "APPROVED",
            "UNAPPROVED",
            "REVIEW_STARTED",
            "APPROVALS_SYNCING",
        ] {
            assert!(
                committed.contains(&format!("  {value}\n")),
                "{value} missing"
            );
        }
    }

    #[test]
    fn the_vendor_copy_is_found_beside_the_main_checkout_or_in_a_parent() {
        let base = std::env::temp_dir().join(format!("xtask-vendor-{}", std::process::id()));
        let (main, worktree) = (base.join("main"), base.join("wt/h9"));
        let vendor = base.join("shared/vendor");
        for dir in [&main, &worktree, &vendor] {
            std::fs::create_dir_all(dir).unwrap();
        }
        let file = vendor.join("x-schema.graphql");
        std::fs::write(&file, "type Query { a: Int }").unwrap();
        let tried = vendor_candidates(&worktree, Some(&main), "x-schema.graphql");
        // Beside the worktree, beside the main checkout, then `shared/` in each parent.
        assert_eq!(
            tried[..3],
            [
                base.join("wt/shared/vendor/x-schema.graphql"),
                file.clone(),
                base.join("wt/h9/shared/vendor/x-schema.graphql"),
            ]
        );
        let mut unique = tried.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), tried.len(), "{tried:?}");
        // Found from the worktree, whose `../shared` does not exist.
        assert_eq!(
            shared_vendor_file(&worktree, "x-schema.graphql").unwrap(),
            file
        );
        // Not found anywhere: one line naming the places tried and --from.
        let err = shared_vendor_file(&worktree, "absent.graphql")
            .unwrap_err()
            .to_string();
        assert!(!err.contains('\n'), "{err}");
        assert!(err.contains("--from FILE|URL"), "{err}");
        assert!(
            err.contains(
                &base
                    .join("shared/vendor/absent.graphql")
                    .display()
                    .to_string()
            ),
            "{err}"
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    const ENUM_SDL: &str = "type Query { s: State }\nenum State { OLD }\n";

    #[test]
    fn the_supplement_extends_enums_once_and_refuses_anything_else() {
        let query = ["{ s }".to_owned()];
        let ext = "extend enum State { NEW OLD }";
        let out = prune_with(ENUM_SDL, Some(ext), &query, "").unwrap();
        assert!(out.contains("enum State {\n  OLD\n  NEW\n}"), "{out}");
        // A vendor schema that already has the value (a newer instance) merges to the same.
        let newer = ENUM_SDL.replace("OLD }", "OLD NEW }");
        assert_eq!(prune_with(&newer, Some(ext), &query, "").unwrap(), out);
        let err = prune_with(ENUM_SDL, Some("extend enum Missing { X }"), &query, "").unwrap_err();
        assert!(err.to_string().contains("Missing"), "{err:#}");
        let err =
            prune_with(ENUM_SDL, Some("extend type Query { x: Int }"), &query, "").unwrap_err();
        assert!(err.to_string().contains("extend enum"), "{err:#}");
    }
}
