//! Hand-written SQL that diesel prepares once per connection and then reuses.
//!
//! diesel keeps a cache of prepared statements on each connection, but only for queries it can
//! prove are the same text every time. `diesel::sql_query` is never cached, and neither are
//! its query builder's `UPDATE`, its `IN` lists (`eq_any`) or `DEFAULT` in an `INSERT`: each
//! call prepares the statement, runs it once and closes it again, three commands where one
//! would do. On the hot paths that is most of the work the server does for a request.
//!
//! [`cached_sql`] is `sql_query` for statements whose text is fixed: the text is `'static`, the
//! values are bound with [`CachedSql::bind`] (one per `?`, in order), and diesel caches the
//! prepared statement under its text. A statement that needs a list of values binds it with
//! [`CachedSql::bind_each`], in one of a few fixed lengths ([`ListStatements`]), so that a
//! connection holds a handful of statements, not one per length.
//!
//! Placeholders are the `?` characters of the text: do not put a `?` anywhere else (in a
//! string literal or a comment). The counts are checked when diesel builds the SQL, before
//! anything is sent: a mismatch is an error, never a wrong statement.

use std::marker::PhantomData;

use diesel::expression::AsExpression;
use diesel::mysql::Mysql;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::result::Error;
use diesel::{QueryResult, RunQueryDsl};

/// A statement of fixed text that diesel may cache. `ST` is the SQL type of its rows (a tuple
/// of `diesel::sql_types`), `Untyped` to load a `QueryableByName` struct as `sql_query` does,
/// or `()` for statements that return none.
#[must_use = "a statement does nothing until it is run"]
pub struct CachedSql<ST, B> {
    sql: &'static str,
    binds: B,
    rows: PhantomData<ST>,
}

/// A statement of the fixed text `sql`, with no value bound yet.
pub fn cached_sql<ST>(sql: &'static str) -> CachedSql<ST, ()> {
    CachedSql { sql, binds: (), rows: PhantomData }
}

impl<ST, B> CachedSql<ST, B> {
    /// Binds the next `?` to `value`, sent as SQL type `T`.
    pub fn bind<T, V: AsExpression<T>>(self, value: V) -> CachedSql<ST, (B, Each<V::Expression>)>
    where
        T: diesel::sql_types::SqlType + diesel::expression::TypedExpressionType,
    {
        self.bind_each::<T, V>(std::iter::once(value))
    }

    /// Binds the next `values.len()` placeholders to `values`, each as SQL type `T`.
    pub fn bind_each<T, V: AsExpression<T>>(
        self,
        values: impl IntoIterator<Item = V>,
    ) -> CachedSql<ST, (B, Each<V::Expression>)>
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
        out: &mut AstPass<'_, 'b, Mysql>,
        text: &mut std::str::Split<'static, char>,
    ) -> QueryResult<()>;
}

impl Binds for () {
    fn walk<'b>(
        &'b self,
        _: &mut AstPass<'_, 'b, Mysql>,
        _: &mut std::str::Split<'static, char>,
    ) -> QueryResult<()> {
        Ok(())
    }
}

impl<B: Binds, E: QueryFragment<Mysql>> Binds for (B, Each<E>) {
    fn walk<'b>(
        &'b self,
        out: &mut AstPass<'_, 'b, Mysql>,
        text: &mut std::str::Split<'static, char>,
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

impl<ST, B: Binds> QueryFragment<Mysql> for CachedSql<ST, B> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Mysql>) -> QueryResult<()> {
        // Every pass (text, binds, cache check) walks the same way; the text pass pushes `?`
        // for each bound value, so the SQL diesel prepares is `self.sql` itself.
        let mut text = self.sql.split('?');
        self.binds.walk(&mut out, &mut text)?;
        out.push_sql(text.next().ok_or_else(|| mismatch("no text left"))?);
        match text.next() {
            Some(_) => Err(mismatch("more placeholders than values")),
            None => Ok(()),
        }
    }
}

/// Not a static id: diesel keys the cache by the statement's text and its bind types.
impl<ST, B> QueryId for CachedSql<ST, B> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<ST, B> Query for CachedSql<ST, B> {
    type SqlType = ST;
}

impl<ST, B, Conn> RunQueryDsl<Conn> for CachedSql<ST, B> {}

/// One statement text per list length, for a statement with an `IN (…)` list: `template` with
/// `{list}` replaced by `n` placeholders, for each `n` of a few fixed sizes. A list is padded
/// to the next size by repeating its last value (which changes nothing in an `IN` list), so a
/// connection caches one statement per size instead of one per length. Keep it in a `static`.
pub struct ListStatements {
    texts: Vec<(usize, String)>,
}

impl ListStatements {
    /// `sizes` ascending; the last is the longest list the statement takes.
    pub fn new(template: &str, sizes: &[usize]) -> Self {
        let texts =
            sizes.iter().map(|&n| (n, template.replace("{list}", &vec!["?"; n].join(", ")))).collect();
        Self { texts }
    }

    /// The text for `values` and the values padded to its length; `None` for an empty list or
    /// one longer than the largest size.
    pub fn padded<T: Clone>(&'static self, values: &[T]) -> Option<(&'static str, Vec<T>)> {
        let last = values.last()?;
        let (size, text) = self.texts.iter().find(|(size, _)| *size >= values.len())?;
        let mut padded = values.to_vec();
        padded.resize(*size, last.clone());
        Some((text.as_str(), padded))
    }
}

#[cfg(test)]
mod tests {
    use diesel::debug_query;
    use diesel::sql_types::{BigInt, Text};

    use super::*;

    #[test]
    fn the_text_is_sent_as_written_with_each_value_bound_to_its_placeholder() {
        let query = cached_sql::<BigInt>("SELECT id FROM t WHERE a = ? AND b IN (?, ?) AND c = ?")
            .bind::<Text, _>("x")
            .bind_each::<BigInt, _>([1i64, 2])
            .bind::<BigInt, _>(3i64);
        let shown = debug_query::<Mysql, _>(&query).to_string();
        assert_eq!(
            shown,
            r#"SELECT id FROM t WHERE a = ? AND b IN (?, ?) AND c = ? -- binds: ["x", 1, 2, 3]"#
        );
    }

    #[test]
    fn a_count_that_does_not_match_the_placeholders_is_an_error() {
        use std::fmt::Write;
        let shown = |query: &dyn Fn(&mut String) -> std::fmt::Result| query(&mut String::new()).is_ok();
        let too_few = cached_sql::<BigInt>("SELECT ? + ?").bind::<BigInt, _>(1i64);
        let too_many = cached_sql::<BigInt>("SELECT ?").bind_each::<BigInt, _>([1i64, 2]);
        let exact = cached_sql::<BigInt>("SELECT ?").bind::<BigInt, _>(1i64);
        assert!(!shown(&|s| write!(s, "{}", debug_query::<Mysql, _>(&too_few))));
        assert!(!shown(&|s| write!(s, "{}", debug_query::<Mysql, _>(&too_many))));
        assert!(shown(&|s| write!(s, "{}", debug_query::<Mysql, _>(&exact))));
    }

    #[test]
    fn lists_are_padded_to_the_next_fixed_size_with_their_last_value() {
        static IN_LIST: std::sync::LazyLock<ListStatements> =
            std::sync::LazyLock::new(|| ListStatements::new("SELECT a FROM t WHERE a IN ({list})", &[1, 4]));
        assert_eq!(IN_LIST.padded(&[7]), Some(("SELECT a FROM t WHERE a IN (?)", vec![7])));
        assert_eq!(
            IN_LIST.padded(&[7, 8]),
            Some(("SELECT a FROM t WHERE a IN (?, ?, ?, ?)", vec![7, 8, 8, 8]))
        );
        assert_eq!(IN_LIST.padded(&[1, 2, 3, 4, 5]), None, "longer than the largest size");
        assert_eq!(IN_LIST.padded::<i32>(&[]), None, "IN () is not SQL");
    }
}
