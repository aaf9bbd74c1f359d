//! The source tree as the docs test reads it: every `.rs` file of `src/` and `tests/` parsed
//! with syn, the lines of a named item, the SQL string literals an item holds, and the names
//! declared anywhere (for the symbol check).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::spanned::Spanned;
use syn::visit::Visit;
use syn::{Expr, ImplItem, Item, Lit, TraitItem};

/// One parsed file: its text (for cutting lines) and its syntax tree.
pub struct File {
    pub text: String,
    pub syntax: syn::File,
}

/// Every `.rs` file under `src/` and `tests/`, parsed once, keyed by its path from the root
/// (`src/bookings/service.rs`).
pub struct Source {
    pub root: PathBuf,
    pub files: BTreeMap<String, File>,
}

impl Source {
    pub fn load(root: &Path) -> Self {
        let mut files = BTreeMap::new();
        for dir in ["src", "tests"] {
            for path in rust_files(&root.join(dir)) {
                let shown = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().replace('\\', "/");
                let text = fs::read_to_string(&path).unwrap_or_default();
                // A file syn cannot parse is left out; rustc reports it better than we could.
                if let Ok(syntax) = syn::parse_file(&text) {
                    files.insert(shown, File { text, syntax });
                }
            }
        }
        Self { root: root.to_path_buf(), files }
    }

    /// A file of the tree, or why there is none.
    pub fn file(&self, path: &str) -> Result<&File, String> {
        self.files.get(path).ok_or_else(|| format!("{path} is not a Rust file of src/ or tests/"))
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else { return found };
    let mut entries: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            found.extend(rust_files(&path));
        } else if path.extension().is_some_and(|x| x == "rs") {
            found.push(path);
        }
    }
    found
}

// -- Items by selector --------------------------------------------------------------------------

/// An item found by its selector: the node, to read its span and its parts.
pub enum Found<'a> {
    Item(&'a Item),
    ImplItem(&'a ImplItem),
    TraitItem(&'a TraitItem),
}

impl Found<'_> {
    fn span(&self) -> Span {
        match self {
            Found::Item(item) => item.span(),
            Found::ImplItem(item) => item.span(),
            Found::TraitItem(item) => item.span(),
        }
    }

    /// The fn's body, if the item is a fn with one.
    fn body(&self) -> Option<&syn::Block> {
        match self {
            Found::Item(Item::Fn(f)) => Some(&f.block),
            Found::ImplItem(ImplItem::Fn(f)) => Some(&f.block),
            Found::TraitItem(TraitItem::Fn(f)) => f.default.as_ref(),
            _ => None,
        }
    }

    /// Calls `visit` with the item, so a visitor sees what it holds.
    fn accept<'ast>(&'ast self, visitor: &mut impl Visit<'ast>) {
        match self {
            Found::Item(item) => visitor.visit_item(item),
            Found::ImplItem(item) => visitor.visit_impl_item(item),
            Found::TraitItem(item) => visitor.visit_trait_item(item),
        }
    }
}

/// The name a top-level (or inline module's) item is selected by; `macro!First` for a macro
/// invocation, `First` being the first identifier inside it (`answers!BookingError`).
fn item_name(item: &Item) -> Option<String> {
    let ident = match item {
        Item::Fn(f) => &f.sig.ident,
        Item::Const(c) => &c.ident,
        Item::Static(s) => &s.ident,
        Item::Struct(s) => &s.ident,
        Item::Enum(e) => &e.ident,
        Item::Trait(t) => &t.ident,
        Item::Type(t) => &t.ident,
        Item::Union(u) => &u.ident,
        Item::Mod(m) => &m.ident,
        Item::Macro(m) => {
            if let Some(ident) = &m.ident {
                return Some(ident.to_string()); // macro_rules! name
            }
            let called = m.mac.path.segments.last()?.ident.to_string();
            let first = m.mac.tokens.clone().into_iter().find_map(|t| match t {
                TokenTree::Ident(i) => Some(i.to_string()),
                _ => None,
            })?;
            return Some(format!("{called}!{first}"));
        }
        _ => return None,
    };
    Some(ident.to_string())
}

/// The last segment of an impl's self type: `Turn` for `impl<'a> Turn<'a>` and
/// `impl Display for Turn`.
fn self_type_name(ty: &syn::Type) -> Option<String> {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        syn::Type::Reference(r) => self_type_name(&r.elem),
        _ => None,
    }
}

fn impl_item_name(item: &ImplItem) -> Option<String> {
    match item {
        ImplItem::Fn(f) => Some(f.sig.ident.to_string()),
        ImplItem::Const(c) => Some(c.ident.to_string()),
        ImplItem::Type(t) => Some(t.ident.to_string()),
        _ => None,
    }
}

fn trait_item_name(item: &TraitItem) -> Option<String> {
    match item {
        TraitItem::Fn(f) => Some(f.sig.ident.to_string()),
        TraitItem::Const(c) => Some(c.ident.to_string()),
        TraitItem::Type(t) => Some(t.ident.to_string()),
        _ => None,
    }
}

/// Every item of `items` that `selector` names: `name`, `Type::name` (an impl's or a trait's
/// item), `module::…` (into an inline module).
fn select<'a>(items: &'a [Item], selector: &[&str]) -> Vec<Found<'a>> {
    let mut found = Vec::new();
    match selector {
        [] => {}
        [name] => {
            found.extend(items.iter().filter(|i| item_name(i).as_deref() == Some(name)).map(Found::Item));
        }
        [first, rest @ ..] => {
            for item in items {
                match item {
                    Item::Mod(m) if m.ident == first => {
                        if let Some((_, inner)) = &m.content {
                            found.extend(select(inner, rest));
                        }
                    }
                    Item::Impl(imp)
                        if rest.len() == 1 && self_type_name(&imp.self_ty).as_deref() == Some(first) =>
                    {
                        found.extend(
                            imp.items
                                .iter()
                                .filter(|i| impl_item_name(i).as_deref() == Some(rest[0]))
                                .map(Found::ImplItem),
                        );
                    }
                    Item::Trait(t) if rest.len() == 1 && t.ident == first => {
                        found.extend(
                            t.items
                                .iter()
                                .filter(|i| trait_item_name(i).as_deref() == Some(rest[0]))
                                .map(Found::TraitItem),
                        );
                    }
                    _ => {}
                }
            }
        }
    }
    found
}

/// The one item of `path` that `selector` names, or why not.
pub fn find<'a>(source: &'a Source, path: &str, selector: &str) -> Result<(&'a File, Found<'a>), String> {
    let file = source.file(path)?;
    let parts: Vec<&str> = selector.split("::").collect();
    let mut found = select(&file.syntax.items, &parts);
    match found.len() {
        1 => Ok((file, found.remove(0))),
        0 => Err(format!("{path} has no item {selector}")),
        n => Err(format!("{path} has {n} items named {selector}: the selector must name one")),
    }
}

/// What of an item a code block shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The whole item, its doc comments and attributes included.
    Whole,
    /// Only the lines inside a fn's braces.
    Body,
    /// Doc comments, attributes and signature, up to the line that opens the body.
    Head,
}

/// The lines `first..=last` (1-based) of `text`, dedented by the smallest indentation among
/// the non-blank ones.
fn cut(text: &str, first: usize, last: usize) -> String {
    let lines: Vec<&str> = text.lines().skip(first - 1).take(last + 1 - first).collect();
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    let mut out = String::new();
    for line in lines {
        out.push_str(line.get(indent..).unwrap_or("").trim_end());
        out.push('\n');
    }
    out
}

/// The item's text as the file has it, dedented to its own indentation.
pub fn item_text(source: &Source, path: &str, selector: &str, part: Part) -> Result<String, String> {
    let (file, found) = find(source, path, selector)?;
    let span = found.span();
    let (start, end) = (span.start().line, span.end().line);
    match part {
        Part::Whole => Ok(cut(&file.text, start, end)),
        Part::Body | Part::Head => {
            let body = found.body().ok_or_else(|| format!("{path} {selector} is not a fn with a body"))?;
            let (open, close) =
                (body.brace_token.span.open().start().line, body.brace_token.span.close().start().line);
            if part == Part::Head {
                Ok(cut(&file.text, start, open))
            } else if close > open + 1 {
                Ok(cut(&file.text, open + 1, close - 1))
            } else {
                Err(format!("{path} {selector} has no body lines of its own"))
            }
        }
    }
}

// -- SQL string literals ------------------------------------------------------------------------

/// Whether a string is a statement (rather than a fragment, a message or a name): it starts
/// with one of the words statements start with.
pub fn looks_like_sql(text: &str) -> bool {
    const STARTS: &[&str] = &[
        "SELECT ",
        "INSERT ",
        "UPDATE ",
        "DELETE ",
        "WITH ",
        "START ",
        "COMMIT",
        "ROLLBACK",
        "SET ",
        "DO ",
        "LOCK ",
        "SHOW ",
        "CREATE ",
        "ALTER ",
        "DROP ",
        "REPLACE ",
        "KILL ",
        "BEGIN",
        "SAVEPOINT",
        "RELEASE ",
    ];
    let t = text.trim_start();
    STARTS.iter().any(|s| t.starts_with(s))
}

/// Collects the string literals of what it visits, in source order, `format!` and `concat!`
/// resolved: a `format!`'s `{}` takes its argument's value (a literal, or a `const`/`static`
/// string of the tree), and `{{`/`}}` become braces.
struct Literals<'s> {
    source: &'s Source,
    found: Vec<String>,
}

impl Literals<'_> {
    /// The string value an argument of `format!` stands for.
    fn value_of(&self, expr: &Expr) -> Option<String> {
        match expr {
            Expr::Lit(syn::ExprLit { lit: Lit::Str(s), .. }) => Some(s.value()),
            Expr::Reference(r) => self.value_of(&r.expr),
            Expr::Path(p) => {
                let segments: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
                const_string(self.source, &segments)
            }
            _ => None,
        }
    }

    fn format(&self, args: &[Expr]) -> Option<String> {
        let Some(Expr::Lit(syn::ExprLit { lit: Lit::Str(template), .. })) = args.first() else { return None };
        let template = template.value();
        let mut values = args[1..].iter();
        let mut out = String::new();
        let mut chars = template.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, chars.peek()) {
                ('{', Some('{')) | ('}', Some('}')) => {
                    chars.next();
                    out.push(c);
                }
                ('{', _) => {
                    // `{}` only: named or numbered arguments are not needed by the tree's SQL.
                    let mut inside = String::new();
                    for d in chars.by_ref() {
                        if d == '}' {
                            break;
                        }
                        inside.push(d);
                    }
                    if !inside.is_empty() {
                        return None;
                    }
                    out.push_str(&self.value_of(values.next()?)?);
                }
                _ => out.push(c),
            }
        }
        Some(out)
    }
}

impl<'ast> Visit<'ast> for Literals<'_> {
    fn visit_lit_str(&mut self, lit: &'ast syn::LitStr) {
        self.found.push(lit.value());
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        let name = mac.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
        let args: Vec<Expr> = mac
            .parse_body_with(syn::punctuated::Punctuated::<Expr, syn::Token![,]>::parse_terminated)
            .map(|p| p.into_iter().collect())
            .unwrap_or_default();
        match name.as_str() {
            "format" => {
                if let Some(text) = self.format(&args) {
                    self.found.push(text);
                }
                return;
            }
            "concat" => {
                let parts: Option<Vec<String>> = args.iter().map(|a| self.value_of(a)).collect();
                if let Some(parts) = parts {
                    self.found.push(parts.concat());
                }
                return;
            }
            _ => {}
        }
        for arg in &args {
            self.visit_expr(arg);
        }
    }
}

/// The string a `const` or `static` named by `segments` holds (`session::LIVE_SESSION`): the
/// last segment is the item, a segment before it names its module file or inline module.
pub fn const_string(source: &Source, segments: &[String]) -> Option<String> {
    let (name, hint) = (segments.last()?, segments.len().checked_sub(2).map(|i| &segments[i]));
    let mut values = Vec::new();
    for (path, file) in &source.files {
        if let Some(hint) = hint
            && hint != "Self"
            && hint != "self"
            && !module_path(path).iter().any(|m| m == hint)
        {
            continue;
        }
        for item in &file.syntax.items {
            let expr = match item {
                Item::Const(c) if c.ident == name => &c.expr,
                Item::Static(s) if s.ident == name => &s.expr,
                _ => continue,
            };
            if let Expr::Lit(syn::ExprLit { lit: Lit::Str(s), .. }) = &**expr {
                values.push(s.value());
            }
        }
    }
    (values.len() == 1).then(|| values.remove(0))
}

/// Every string literal of an item, in source order, with `format!` and `concat!` resolved.
fn literals_of(source: &Source, found: &Found) -> Vec<String> {
    let mut visitor = Literals { source, found: Vec::new() };
    found.accept(&mut visitor);
    visitor.found
}

/// Every string literal of a file (`format!` and `concat!` resolved).
pub fn literals_of_file(source: &Source, path: &str) -> Result<Vec<String>, String> {
    let file = source.file(path)?;
    let mut visitor = Literals { source, found: Vec::new() };
    visitor.visit_file(&file.syntax);
    Ok(visitor.found)
}

/// The identifiers of a file's code and the words of its string literals, comments left out:
/// what a hand-written statement built by diesel's query builder may name.
pub fn names_in_code(source: &Source, path: &str) -> Result<BTreeSet<String>, String> {
    let file = source.file(path)?;
    let tokens: TokenStream = file.text.parse().map_err(|e| format!("{path}: {e}"))?;
    fn walk(tokens: TokenStream, out: &mut BTreeSet<String>) {
        for tree in tokens {
            match tree {
                TokenTree::Ident(i) => {
                    out.insert(i.to_string());
                }
                TokenTree::Group(g) => {
                    // `#[doc = "…"]`, a doc comment: prose, not code.
                    let is_doc = g.stream().into_iter().next().is_some_and(|t| t.to_string() == "doc");
                    if !is_doc {
                        walk(g.stream(), out);
                    }
                }
                TokenTree::Literal(l) => {
                    let text = l.to_string();
                    if text.starts_with('"') || text.starts_with('r') {
                        out.extend(
                            text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                                .filter(|w| !w.is_empty())
                                .map(str::to_string),
                        );
                    }
                }
                TokenTree::Punct(_) => {}
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(tokens, &mut out);
    Ok(out)
}

/// The `nth` (1-based) statement among the string literals of the item: for a `const` or a
/// `static` (a `LazyLock` initializer included) usually its only one; for a fn, its first
/// statement unless `nth` says otherwise.
pub fn item_sql(source: &Source, path: &str, selector: &str, nth: usize) -> Result<String, String> {
    let (_, found) = find(source, path, selector)?;
    let statements: Vec<String> =
        literals_of(source, &found).into_iter().filter(|s| looks_like_sql(s)).collect();
    statements.get(nth - 1).cloned().ok_or_else(|| {
        format!(
            "{path} {selector} holds {} statement(s) as string literals, not a statement number {nth}",
            statements.len()
        )
    })
}

// -- Names declared in the tree -----------------------------------------------------------------

/// The module path of a file: `src/bookings/service.rs` → `bookings::service`,
/// `src/db/mod.rs` → `db`, `tests/it/statements.rs` → `it::statements`.
pub fn module_path(path: &str) -> Vec<String> {
    let trimmed = path.strip_suffix(".rs").unwrap_or(path);
    let mut parts: Vec<String> = trimmed.split('/').map(str::to_string).collect();
    if parts.first().is_some_and(|p| p == "src") {
        parts.remove(0);
    }
    if parts.last().is_some_and(|p| p == "mod" || p == "lib" || p == "main") {
        parts.pop();
    }
    parts
}

/// What the tree declares: every item, impl member, variant and field with the path it is
/// declared under, and the flat sets the symbol check asks about.
#[derive(Default)]
pub struct Names {
    /// Full paths: module path, then the type (for members, variants, fields), then the name.
    pub paths: Vec<Vec<String>>,
    /// Every declared name (items, members, variants, fields, modules, fn parameters).
    pub declared: BTreeSet<String>,
    /// Fns of `tests/`, and `#[test]` fns anywhere.
    pub tests: BTreeSet<String>,
    /// `const` and `static` names.
    pub consts: BTreeSet<String>,
    /// String literal values of `src/`, `tests/`.
    pub strings: BTreeSet<String>,
    /// Status names and codes next to each other in the source: `CONFLICT "fully_booked"`
    /// (in `answers!`) or `StatusCode::CONFLICT, "busy"`.
    pub answers: BTreeSet<(String, String)>,
}

struct Collector<'n> {
    names: &'n mut Names,
    module: Vec<String>,
    in_tests_dir: bool,
}

impl Collector<'_> {
    fn add(&mut self, within: &[String], name: String) {
        let mut path = self.module.clone();
        path.extend(within.iter().cloned());
        path.push(name.clone());
        self.names.paths.push(path);
        self.names.declared.insert(name);
    }

    fn fields(&mut self, owner: &str, fields: &syn::Fields) {
        for field in fields {
            if let Some(ident) = &field.ident {
                self.add(&[owner.to_string()], ident.to_string());
            }
        }
    }

    fn tokens(&mut self, tokens: TokenStream) {
        // Status next to code, and nested groups, anywhere in macro bodies.
        let trees: Vec<TokenTree> = tokens.into_iter().collect();
        for (i, tree) in trees.iter().enumerate() {
            match tree {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(ident) => {
                    let mut next = trees.get(i + 1);
                    if let Some(TokenTree::Punct(p)) = next
                        && p.as_char() == ','
                    {
                        next = trees.get(i + 2);
                    }
                    if let Some(TokenTree::Literal(lit)) = next
                        && status_number(&ident.to_string()).is_some()
                    {
                        let text = lit.to_string();
                        if let Some(code) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
                            self.names.answers.insert((ident.to_string(), code.to_string()));
                        }
                    }
                }
                TokenTree::Literal(lit) => {
                    let text = lit.to_string();
                    if let Some(s) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
                        self.names.strings.insert(s.to_string());
                    }
                }
                TokenTree::Punct(_) => {}
            }
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast Item) {
        match item {
            Item::Mod(m) => {
                self.add(&[], m.ident.to_string());
                if let Some((_, items)) = &m.content {
                    self.module.push(m.ident.to_string());
                    for inner in items {
                        self.visit_item(inner);
                    }
                    self.module.pop();
                }
                return;
            }
            Item::Impl(imp) => {
                if let Some(owner) = self_type_name(&imp.self_ty) {
                    for member in &imp.items {
                        if let Some(name) = impl_item_name(member) {
                            self.add(std::slice::from_ref(&owner), name);
                        }
                    }
                }
            }
            Item::Trait(t) => {
                self.add(&[], t.ident.to_string());
                for member in &t.items {
                    if let Some(name) = trait_item_name(member) {
                        self.add(&[t.ident.to_string()], name);
                    }
                }
            }
            Item::Enum(e) => {
                self.add(&[], e.ident.to_string());
                for variant in &e.variants {
                    self.add(&[e.ident.to_string()], variant.ident.to_string());
                    self.fields(&variant.ident.to_string(), &variant.fields);
                }
            }
            Item::Struct(s) => {
                self.add(&[], s.ident.to_string());
                self.fields(&s.ident.to_string(), &s.fields);
            }
            Item::Const(c) => {
                self.names.consts.insert(c.ident.to_string());
                self.add(&[], c.ident.to_string());
            }
            Item::Static(s) => {
                self.names.consts.insert(s.ident.to_string());
                self.add(&[], s.ident.to_string());
            }
            Item::Fn(f) => {
                let name = f.sig.ident.to_string();
                let is_test = f.attrs.iter().any(|a| a.path().is_ident("test"));
                if self.in_tests_dir || is_test {
                    self.names.tests.insert(name.clone());
                }
                self.add(&[], name);
            }
            Item::Macro(m) => {
                if let Some(ident) = &m.ident {
                    self.add(&[], ident.to_string());
                } else if self.in_tests_dir {
                    // Tests declared by a macro (`on_both_engines!(name, name_on_postgres => body)`):
                    // every name in it may be a test's.
                    for name in idents(m.mac.tokens.clone()) {
                        self.names.tests.insert(name.clone());
                        self.add(&[], name);
                    }
                }
                self.tokens(m.mac.tokens.clone());
            }
            other => {
                if let Some(name) = item_name(other) {
                    self.add(&[], name);
                }
            }
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_impl_item_const(&mut self, c: &'ast syn::ImplItemConst) {
        self.names.consts.insert(c.ident.to_string());
        syn::visit::visit_impl_item_const(self, c);
    }

    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // Handled in visit_item, with the module path.
    }

    fn visit_fn_arg(&mut self, arg: &'ast syn::FnArg) {
        if let syn::FnArg::Typed(t) = arg
            && let syn::Pat::Ident(p) = &*t.pat
        {
            self.names.declared.insert(p.ident.to_string());
        }
        syn::visit::visit_fn_arg(self, arg);
    }

    fn visit_lit_str(&mut self, lit: &'ast syn::LitStr) {
        self.names.strings.insert(lit.value());
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.tokens(mac.tokens.clone());
    }

    fn visit_expr_path(&mut self, p: &'ast syn::ExprPath) {
        // `StatusCode::CONFLICT, "busy"` in a call: the pair is read from the call's arguments.
        syn::visit::visit_expr_path(self, p);
    }

    fn visit_expr_call(&mut self, call: &'ast syn::ExprCall) {
        let args: Vec<&Expr> = call.args.iter().collect();
        for pair in args.windows(2) {
            if let (Expr::Path(status), Expr::Lit(syn::ExprLit { lit: Lit::Str(code), .. })) =
                (pair[0], pair[1])
                && let Some(last) = status.path.segments.last()
                && status_number(&last.ident.to_string()).is_some()
            {
                self.names.answers.insert((last.ident.to_string(), code.value()));
            }
        }
        syn::visit::visit_expr_call(self, call);
    }
}

/// Every identifier of a token stream, nested groups included.
fn idents(tokens: TokenStream) -> Vec<String> {
    let mut found = Vec::new();
    for tree in tokens {
        match tree {
            TokenTree::Ident(i) => found.push(i.to_string()),
            TokenTree::Group(g) => found.extend(idents(g.stream())),
            _ => {}
        }
    }
    found
}

/// The status code named by an `http::StatusCode` constant, for the ones the app answers with.
pub fn status_number(name: &str) -> Option<u16> {
    const STATUSES: &[(&str, u16)] = &[
        ("OK", 200),
        ("CREATED", 201),
        ("NO_CONTENT", 204),
        ("SEE_OTHER", 303),
        ("NOT_MODIFIED", 304),
        ("BAD_REQUEST", 400),
        ("UNAUTHORIZED", 401),
        ("FORBIDDEN", 403),
        ("NOT_FOUND", 404),
        ("METHOD_NOT_ALLOWED", 405),
        ("NOT_ACCEPTABLE", 406),
        ("CONFLICT", 409),
        ("GONE", 410),
        ("PRECONDITION_FAILED", 412),
        ("PAYLOAD_TOO_LARGE", 413),
        ("UNSUPPORTED_MEDIA_TYPE", 415),
        ("UNPROCESSABLE_ENTITY", 422),
        ("LOCKED", 423),
        ("PRECONDITION_REQUIRED", 428),
        ("TOO_MANY_REQUESTS", 429),
        ("INTERNAL_SERVER_ERROR", 500),
        ("SERVICE_UNAVAILABLE", 503),
    ];
    STATUSES.iter().find(|(n, _)| *n == name).map(|(_, code)| *code)
}

impl Names {
    pub fn collect(source: &Source) -> Self {
        let mut names = Names::default();
        for (path, file) in &source.files {
            // This test's own files name wrong symbols on purpose, to prove they are caught.
            if path.starts_with("tests/docs/") {
                continue;
            }
            let mut collector = Collector {
                names: &mut names,
                module: module_path(path),
                in_tests_dir: path.starts_with("tests/"),
            };
            // The file itself is a module of its parent.
            if let Some(last) = collector.module.last().cloned() {
                collector.names.declared.insert(last);
            }
            collector.visit_file(&file.syntax);
        }
        names
    }

    /// Whether `segments` (`Namespace::booking`, `locking::Turn`) names something declared:
    /// the last segment exactly, the ones before it in order somewhere on the declared path
    /// (`locking::Turn` is `locking::queue::Turn`, re-exported).
    pub fn resolves(&self, segments: &[&str]) -> bool {
        let Some((last, before)) = segments.split_last() else { return false };
        self.paths.iter().any(|path| {
            let Some((name, within)) = path.split_last() else { return false };
            if name != last {
                return false;
            }
            let mut rest = within.iter();
            before.iter().all(|want| rest.any(|have| have == want))
        })
    }
}

/// Every `answers!` pair as (status number, code).
pub fn answer_pairs(names: &Names) -> HashMap<String, BTreeSet<u16>> {
    let mut by_code: HashMap<String, BTreeSet<u16>> = HashMap::new();
    for (status, code) in &names.answers {
        if let Some(number) = status_number(status) {
            by_code.entry(code.clone()).or_default().insert(number);
        }
    }
    by_code
}
