//! Hand-written SQL that diesel prepares once per connection and then reuses.
//!
//! diesel keeps a cache of prepared statements on each connection, but only for queries it can
//! prove are the same text every time. `diesel::sql_query` is never cached, and neither are
//! its query builder's `UPDATE`, its `IN` lists (`eq_any`) or `DEFAULT` in an `INSERT`: each
//! call prepares the statement, runs it once and closes it again, three commands where one
//! would do. On the hot paths that is most of the work the server does for a request.
//!
//! [`cached_sql`] is `sql_query` for statements whose text is fixed (in the app, always a
//! `'static` text): the values are bound with [`CachedSql::bind`] (one per `?`, in order), and
//! diesel caches the prepared statement under its text. A statement that needs a list of values binds it with
//! [`CachedSql::bind_each`], in one of a few fixed lengths ([`ListStatements`]), so that a
//! connection holds a handful of statements, not one per length.
//!
//! Placeholders are the `?` characters of the text: do not put a `?` anywhere else (in a
//! string literal or a comment). Each engine gets its own kind of placeholder in their place
//! (`?` for MySQL, `$1`, `$2`, … for PostgreSQL), which `sql_query` cannot do: its text is
//! sent as written. The counts are checked when diesel builds
//! the SQL, before anything is sent: a mismatch is an error, never a wrong statement.
//!
//! Most statements read the same on both engines. A few words that differ are written as
//! `{tokens}` the engine's dialect fills in (`{now}`, `{share}`, …: `db::dialect`). A statement
//! whose shape differs is written once per engine with [`Sql::per_engine`], the two texts side by
//! side where a reader compares them.

use std::borrow::Cow;
use std::marker::PhantomData;

use diesel::expression::AsExpression;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::result::Error;
use diesel::{QueryResult, RunQueryDsl};

use super::conn::{Engine, MultiBackend};

/// The fixed text of a statement: one for every engine, or one per engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sql<'a> {
    mysql: &'a str,
    postgres: &'a str,
}

impl<'a> Sql<'a> {
    /// A statement whose dialects differ: MySQL's text and PostgreSQL's, with the same
    /// placeholders in the same order.
    pub const fn per_engine(mysql: &'a str, postgres: &'a str) -> Self {
        Self { mysql, postgres }
    }

    /// The text for `engine`, its `{tokens}` in the engine's words; an unknown token is an
    /// error, and the statement is not sent.
    pub fn on(self, engine: Engine) -> QueryResult<Cow<'a, str>> {
        super::dialect::expand(engine.dialect(), engine.pick(self.mysql, self.postgres))
            .map_err(|unknown| Error::QueryBuilderError(unknown.into()))
    }
}

impl<'a> From<&'a String> for Sql<'a> {
    fn from(text: &'a String) -> Self {
        Self::from(text.as_str())
    }
}

impl<'a> From<&'a str> for Sql<'a> {
    fn from(text: &'a str) -> Self {
        Self { mysql: text, postgres: text }
    }
}

/// A statement of fixed text that diesel may cache. `ST` is the SQL type of its rows (a tuple
/// of `diesel::sql_types`), `Untyped` to load a `QueryableByName` struct as `sql_query` does,
/// or `()` for statements that return none.
#[must_use = "a statement does nothing until it is run"]
pub struct CachedSql<'a, ST, B> {
    sql: Sql<'a>,
    binds: B,
    rows: PhantomData<ST>,
}

/// A statement of the fixed text `sql`, with no value bound yet.
pub fn cached_sql<'a, ST>(sql: impl Into<Sql<'a>>) -> CachedSql<'a, ST, ()> {
    CachedSql { sql: sql.into(), binds: (), rows: PhantomData }
}

impl<'a, ST, B> CachedSql<'a, ST, B> {
    /// Binds the next `?` to `value`, sent as SQL type `T`.
    pub fn bind<T, V: AsExpression<T>>(self, value: V) -> CachedSql<'a, ST, (B, Each<V::Expression>)>
    where
        T: diesel::sql_types::SqlType + diesel::expression::TypedExpressionType,
    {
        self.bind_each::<T, V>(std::iter::once(value))
    }

    /// Binds the next `values.len()` placeholders to `values`, each as SQL type `T`.
    pub fn bind_each<T, V: AsExpression<T>>(
        self,
        values: impl IntoIterator<Item = V>,
    ) -> CachedSql<'a, ST, (B, Each<V::Expression>)>
    where
        T: diesel::sql_types::SqlType + diesel::expression::TypedExpressionType,
    {
        let each = Each(values.into_iter().map(AsExpression::as_expression).collect());
        CachedSql { sql: self.sql, binds: (self.binds, each), rows: PhantomData }
    }
}

/// Bound values, one per placeholder.
pub struct Each<E>(Vec<E>);

/// The bound values, in order, each written after the text that precedes its `?`.
pub trait Binds {
    fn walk<'b>(
        &'b self,
        out: &mut AstPass<'_, 'b, MultiBackend>,
        text: &mut std::str::Split<'_, char>,
    ) -> QueryResult<()>;
}

impl Binds for () {
    fn walk<'b>(
        &'b self,
        _: &mut AstPass<'_, 'b, MultiBackend>,
        _: &mut std::str::Split<'_, char>,
    ) -> QueryResult<()> {
        Ok(())
    }
}

impl<B: Binds, E: QueryFragment<MultiBackend>> Binds for (B, Each<E>) {
    fn walk<'b>(
        &'b self,
        out: &mut AstPass<'_, 'b, MultiBackend>,
        text: &mut std::str::Split<'_, char>,
    ) -> QueryResult<()> {
        self.0.walk(out, text)?;
        for value in &self.1.0 {
            out.push_sql(text.next().ok_or_else(|| mismatch("more values than placeholders"))?);
            value.walk_ast(out.reborrow())?;
        }
        Ok(())
    }
}

fn mismatch(what: &str) -> Error {
    Error::QueryBuilderError(format!("cached_sql: {what}").into())
}

impl<ST, B: Binds> QueryFragment<MultiBackend> for CachedSql<'_, ST, B> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, MultiBackend>) -> QueryResult<()> {
        // Every pass (text, binds, cache check) walks the same way; the text pass pushes the
        // engine's placeholder for each bound value, so on MySQL the SQL diesel prepares is the
        // text itself.
        // `AstPass::backend` is public but left out of diesel's docs; the MultiConnection derive
        // reads the engine the same way.
        let engine = match out.backend() {
            MultiBackend::Mysql(_) => Engine::Mysql,
            MultiBackend::Postgres(_) => Engine::Postgres,
        };
        let sql = self.sql.on(engine)?;
        let mut text = sql.split('?');
        self.binds.walk(&mut out, &mut text)?;
        out.push_sql(text.next().ok_or_else(|| mismatch("no text left"))?);
        match text.next() {
            Some(_) => Err(mismatch("more placeholders than values")),
            None => Ok(()),
        }
    }
}

/// Not a static id: diesel keys the cache by the statement's text and its bind types.
impl<ST, B> QueryId for CachedSql<'_, ST, B> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<ST, B> Query for CachedSql<'_, ST, B> {
    type SqlType = ST;
}

impl<ST, B, Conn> RunQueryDsl<Conn> for CachedSql<'_, ST, B> {}

/// One statement text per list length, for a statement with an `IN (…)` list: `template` with
/// `{list}` replaced by `n` placeholders, for each `n` of a few fixed sizes. A list is padded
/// to the next size by repeating its last value (which changes nothing in an `IN` list), so a
/// connection caches one statement per size instead of one per length. Keep it in a `static`:
/// its texts are written out once per engine, `{tokens}` included, when it is made.
pub struct ListStatements {
    /// For each size: MySQL's text and PostgreSQL's.
    texts: Vec<(usize, String, String)>,
}

impl ListStatements {
    /// `sizes` ascending; the last is the longest list the statement takes.
    pub fn new(template: &str, sizes: &[usize]) -> Self {
        Self::per_engine(template, template, sizes)
    }

    /// A statement whose dialects differ: MySQL's template and PostgreSQL's.
    pub fn per_engine(mysql: &str, postgres: &str, sizes: &[usize]) -> Self {
        let list = |n: usize| vec!["?"; n].join(", ");
        let text = |engine: Engine, template: &str, n| {
            // Built once, from constant templates: an unknown token is a bug in this code.
            Sql::from(template.replace("{list}", &list(n)).as_str())
                .on(engine)
                .unwrap_or_else(|e| panic!("a list statement's template: {e}"))
                .into_owned()
        };
        let texts = sizes
            .iter()
            .map(|&n| (n, text(Engine::Mysql, mysql, n), text(Engine::Postgres, postgres, n)))
            .collect();
        Self { texts }
    }

    /// The text for `values` and the values padded to its length; `None` for an empty list or
    /// one longer than the largest size.
    pub fn padded<T: Clone>(&self, values: &[T]) -> Option<(Sql<'_>, Vec<T>)> {
        let last = values.last()?;
        let (size, mysql, postgres) = self.texts.iter().find(|(size, ..)| *size >= values.len())?;
        let mut padded = values.to_vec();
        padded.resize(*size, last.clone());
        Some((Sql::per_engine(mysql, postgres), padded))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_engine_gets_its_own_text_and_a_shared_text_serves_both() {
        let on = |sql: Sql<'static>, engine| sql.on(engine).expect("known tokens").into_owned();
        let shared = Sql::from("SELECT 1");
        assert_eq!(
            (on(shared, Engine::Mysql), on(shared, Engine::Postgres)),
            ("SELECT 1".into(), "SELECT 1".into())
        );
        let apart = Sql::per_engine("SELECT 'my'", "SELECT 'pg'");
        assert_eq!(on(apart, Engine::Mysql), "SELECT 'my'");
        assert_eq!(on(apart, Engine::Postgres), "SELECT 'pg'");
        let tokens = Sql::from("SELECT {now}");
        assert_eq!(on(tokens, Engine::Mysql), "SELECT NOW(6)");
        assert_eq!(on(tokens, Engine::Postgres), "SELECT CAST(statement_timestamp() AS timestamp)");
        assert!(Sql::from("SELECT {nwo}").on(Engine::Mysql).is_err(), "a typo is not sent");
    }

    #[test]
    fn lists_are_padded_to_the_next_fixed_size_with_their_last_value() {
        static IN_LIST: std::sync::LazyLock<ListStatements> =
            std::sync::LazyLock::new(|| ListStatements::new("SELECT a FROM t WHERE a IN ({list})", &[1, 4]));
        assert_eq!(IN_LIST.padded(&[7]), Some(("SELECT a FROM t WHERE a IN (?)".into(), vec![7])));
        assert_eq!(
            IN_LIST.padded(&[7, 8]),
            Some(("SELECT a FROM t WHERE a IN (?, ?, ?, ?)".into(), vec![7, 8, 8, 8]))
        );
        assert_eq!(IN_LIST.padded(&[1, 2, 3, 4, 5]), None, "longer than the largest size");
        assert_eq!(IN_LIST.padded::<i32>(&[]), None, "IN () is not SQL");
    }
}
