//! One schema, written twice: `migrations/mysql` and `migrations/postgres` are kept by hand, and
//! `src/schema.rs` (diesel's view of the tables, which every query is checked against) is
//! generated from MySQL's and edited. These tests migrate a database on each engine and read
//! back what the servers made of them, so that a column, a `NOT NULL`, a key or an index added
//! to one engine's migration and forgotten in the other (or in `schema.rs`) fails here, not in
//! production on the engine nobody tried.
//!
//! What is compared: the tables; each column's name, nullability and kind of type (the engines
//! spell types differently: `DATETIME(6)` and `timestamptz` are both a time, `TINYINT(1)` and
//! `boolean` both a yes/no, and `CHAR(64)` and `varchar(64)` both a string of at most 64: a hash
//! or a token has one length, and PostgreSQL's manual advises against `character(n)`); every index and key as its table, whether it is unique and its
//! columns in order (names differ by engine, and a primary key is a unique index on both). Not
//! compared: foreign keys' targets, defaults and check constraints.

use std::collections::{BTreeMap, BTreeSet};

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use haita::db::{DbConn, Engine, Sql, cached_sql};

use crate::common::TestDb;

/// A column as both engines' `information_schema` describe it.
#[derive(QueryableByName)]
struct Column {
    #[diesel(sql_type = Text)]
    table_name: String,
    #[diesel(sql_type = Text)]
    column_name: String,
    #[diesel(sql_type = Text)]
    is_nullable: String,
    #[diesel(sql_type = Text)]
    data_type: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    max_length: Option<i64>,
}

/// One index: its table, its name, whether it lets two rows share its values, its columns.
#[derive(QueryableByName)]
struct Index {
    #[diesel(sql_type = Text)]
    table_name: String,
    #[diesel(sql_type = Text)]
    index_name: String,
    #[diesel(sql_type = BigInt)]
    non_unique: i64,
    #[diesel(sql_type = Text)]
    columns: String,
}

/// A column's kind of type, in words both engines share (`string(40)`, `int64`, `time`…).
fn kind(engine: Engine, data_type: &str, max_length: Option<i64>) -> String {
    let data_type = data_type.to_ascii_lowercase();
    let shared = match (engine, data_type.as_str()) {
        (_, "bigint") => "int64",
        (Engine::Mysql, "int") | (Engine::Postgres, "integer") => "int32",
        (_, "smallint") => "int16",
        (Engine::Mysql, "tinyint") | (Engine::Postgres, "boolean") => "yes/no",
        (Engine::Mysql, "varchar" | "char") | (Engine::Postgres, "character varying" | "character") => {
            return format!("string({})", max_length.unwrap_or_default());
        }
        (Engine::Mysql, "text" | "mediumtext" | "longtext") | (Engine::Postgres, "text") => "text",
        (Engine::Mysql, "datetime" | "timestamp")
        | (Engine::Postgres, "timestamp without time zone" | "timestamp with time zone") => "time",
        (_, "date") => "date",
        (Engine::Mysql, "json" | "longtext json") | (Engine::Postgres, "json" | "jsonb") => "json",
        (Engine::Mysql, "decimal") | (Engine::Postgres, "numeric") => "decimal",
        (Engine::Mysql, "double") | (Engine::Postgres, "double precision") => "float64",
        (Engine::Mysql, "blob" | "varbinary" | "binary") | (Engine::Postgres, "bytea") => "bytes",
        _ => return format!("{engine:?} {data_type}"),
    };
    shared.to_string()
}

/// The tables of the app (not diesel's bookkeeping), each column → (nullable, kind).
type Tables = BTreeMap<String, BTreeMap<String, (bool, String)>>;

fn tables(conn: &mut DbConn) -> Tables {
    let engine = conn.engine();
    let columns: Vec<Column> = cached_sql::<diesel::sql_types::Untyped>(Sql::per_engine(
        "SELECT TABLE_NAME AS table_name, COLUMN_NAME AS column_name, IS_NULLABLE AS is_nullable, \
                DATA_TYPE AS data_type, CAST(CHARACTER_MAXIMUM_LENGTH AS SIGNED) AS max_length \
         FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE()",
        "SELECT table_name::text, column_name::text, is_nullable::text, data_type::text, \
                character_maximum_length::bigint AS max_length \
         FROM information_schema.columns WHERE table_schema = current_schema()",
    ))
    .load(conn)
    .expect("columns");
    let mut tables = Tables::new();
    for c in columns.into_iter().filter(|c| !c.table_name.starts_with("__diesel")) {
        tables
            .entry(c.table_name)
            .or_default()
            .insert(c.column_name, (c.is_nullable == "YES", kind(engine, &c.data_type, c.max_length)));
    }
    tables
}

/// An index as both engines have it: its table, whether it is unique, its columns in order.
type IndexShape = (String, bool, String);

/// Every index of the app's tables, and those of them named after a foreign key: on MySQL the
/// ones it may have made by itself for a foreign key that had no index to use (PostgreSQL makes
/// none).
fn indexes(conn: &mut DbConn) -> (BTreeSet<IndexShape>, BTreeSet<IndexShape>) {
    let found: Vec<Index> = cached_sql::<diesel::sql_types::Untyped>(Sql::per_engine(
        "SELECT TABLE_NAME AS table_name, INDEX_NAME AS index_name, \
                CAST(MAX(NON_UNIQUE) AS SIGNED) AS non_unique, \
                CAST(GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX SEPARATOR ',') AS CHAR) AS columns \
         FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() \
         GROUP BY TABLE_NAME, INDEX_NAME",
        "SELECT t.relname::text AS table_name, i.relname::text AS index_name, \
                CASE WHEN x.indisunique THEN 0 ELSE 1 END::bigint AS non_unique, \
                string_agg(a.attname::text, ',' ORDER BY k.ord) AS columns \
         FROM pg_index x \
         JOIN pg_class t ON t.oid = x.indrelid \
         JOIN pg_class i ON i.oid = x.indexrelid \
         JOIN pg_namespace n ON n.oid = t.relnamespace \
         CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
         JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
         WHERE n.nspname = current_schema() \
         GROUP BY t.relname, i.relname, x.indisunique",
    ))
    .load(conn)
    .expect("indexes");
    let foreign_keys: BTreeSet<String> = match conn.engine() {
        Engine::Mysql => {
            #[derive(QueryableByName)]
            struct Named {
                #[diesel(sql_type = Text)]
                name: String,
            }
            cached_sql::<diesel::sql_types::Untyped>(
                "SELECT CONSTRAINT_NAME AS name FROM information_schema.REFERENTIAL_CONSTRAINTS \
                 WHERE CONSTRAINT_SCHEMA = DATABASE()",
            )
            .load::<Named>(conn)
            .expect("foreign keys")
            .into_iter()
            .map(|n| n.name)
            .collect()
        }
        Engine::Postgres => BTreeSet::new(),
    };
    let mut all = BTreeSet::new();
    let mut for_foreign_keys = BTreeSet::new();
    for index in found.into_iter().filter(|i| !i.table_name.starts_with("__diesel")) {
        let key = (index.table_name, index.non_unique == 0, index.columns);
        if foreign_keys.contains(&index.index_name) {
            for_foreign_keys.insert(key.clone());
        }
        all.insert(key);
    }
    (all, for_foreign_keys)
}

/// What one side has and the other has not, one line each.
fn differences<T: Ord + std::fmt::Debug>(mysql: &BTreeSet<T>, postgres: &BTreeSet<T>) -> Vec<String> {
    let only = |side: &str, of: &BTreeSet<T>, other: &BTreeSet<T>| {
        of.difference(other).map(|x| format!("only on {side}: {x:?}")).collect::<Vec<_>>()
    };
    [only("MySQL", mysql, postgres), only("PostgreSQL", postgres, mysql)].concat()
}

fn columns_of(tables: &Tables) -> BTreeSet<(String, String, bool, String)> {
    tables
        .iter()
        .flat_map(|(table, columns)| {
            columns
                .iter()
                .map(|(column, (nullable, kind))| (table.clone(), column.clone(), *nullable, kind.clone()))
        })
        .collect()
}

/// Both engines' migrations make the same tables, columns (names, nullability, kinds of type)
/// and indexes (unique or not, columns in order). The one difference allowed is the engines':
/// MySQL gives a foreign key an index of its own when none of the table's can serve it.
#[test]
fn both_engines_migrations_make_the_same_tables_columns_keys_and_indexes() {
    let (mysql, postgres) = (TestDb::new(), TestDb::postgres());
    let (my_tables, pg_tables) = (tables(&mut mysql.conn()), tables(&mut postgres.conn()));
    assert!(my_tables.len() > 15, "read the tables: {:?}", my_tables.keys());
    let unknown: Vec<_> = columns_of(&my_tables)
        .into_iter()
        .chain(columns_of(&pg_tables))
        .filter(|(_, _, _, kind)| kind.contains("Mysql ") || kind.contains("Postgres "))
        .collect();
    assert!(unknown.is_empty(), "types this test does not know how to compare: {unknown:#?}");
    let columns = differences(&columns_of(&my_tables), &columns_of(&pg_tables));
    assert!(columns.is_empty(), "the engines' columns differ:\n{}", columns.join("\n"));

    let ((my_indexes, foreign_key_indexes), (pg_indexes, _)) =
        (indexes(&mut mysql.conn()), indexes(&mut postgres.conn()));
    assert!(my_indexes.len() > 20, "read the indexes: {my_indexes:?}");
    let mysql_own: BTreeSet<_> = my_indexes
        .iter()
        .filter(|i| !pg_indexes.contains(*i) && foreign_key_indexes.contains(*i))
        .cloned()
        .collect();
    let my_indexes: BTreeSet<_> = my_indexes.difference(&mysql_own).cloned().collect();
    let indexes = differences(&my_indexes, &pg_indexes);
    assert!(indexes.is_empty(), "the engines' indexes differ:\n{}", indexes.join("\n"));
}

/// The columns `src/schema.rs` declares NOT NULL although the server has them nullable, and why
/// no NULL can be read from them.
const NEVER_NULL: &[(&str, &str, &str)] = &[(
    "reservations",
    "nights",
    "generated from two NOT NULL dates; MariaDB cannot declare a generated column NOT NULL",
)];

/// `src/schema.rs` (what diesel checks every query against) has exactly the migrated tables and
/// columns, each as nullable as the server has it (but for [`NEVER_NULL`]), each a type of the
/// same kind, each `max_length` the column's.
#[test]
fn schema_rs_matches_the_migrated_tables() {
    let mysql = TestDb::new();
    let mut migrated = tables(&mut mysql.conn());
    for (table, column, why) in NEVER_NULL {
        let nullable =
            migrated.get_mut(*table).and_then(|columns| columns.get_mut(*column)).map(|c| &mut c.0);
        assert_eq!(nullable.as_deref(), Some(&true), "{table}.{column} is nullable on the server ({why})");
        if let Some(nullable) = nullable {
            *nullable = false;
        }
    }
    let declared = declared_tables(include_str!("../../src/schema.rs"));
    assert!(declared.len() > 15, "read src/schema.rs: {:?}", declared.keys());
    let differ = differences(&columns_of(&migrated), &columns_of(&declared));
    let differ: Vec<String> = differ
        .into_iter()
        .map(|line| {
            line.replace("only on MySQL", "only migrated").replace("only on PostgreSQL", "only in schema.rs")
        })
        .collect();
    assert!(differ.is_empty(), "src/schema.rs and the migrations differ:\n{}", differ.join("\n"));
}

/// The tables `diesel::table!` declares in `text`, each column → (nullable, kind), in the
/// words of [`kind`].
fn declared_tables(text: &str) -> Tables {
    let mut tables = Tables::new();
    let mut table: Option<String> = None;
    let mut max_length: Option<i64> = None;
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("#[max_length = ") {
            max_length = rest.trim_end_matches(']').parse().ok();
        } else if let Some((name, rest)) = line.split_once(" (").filter(|(_, rest)| rest.ends_with(") {")) {
            let _ = rest;
            table = Some(name.to_string());
        } else if let (Some(table), Some((column, ty))) = (&table, line.split_once(" -> ")) {
            let ty = ty.trim_end_matches(',');
            let (nullable, ty) = match ty.strip_prefix("Nullable<").and_then(|t| t.strip_suffix('>')) {
                Some(inner) => (true, inner),
                None => (false, ty),
            };
            let kind = match ty {
                "Bigint" => "int64".to_string(),
                "Integer" => "int32".to_string(),
                "Smallint" => "int16".to_string(),
                "Bool" => "yes/no".to_string(),
                "Varchar" | "Char" | "Bpchar" => format!("string({})", max_length.unwrap_or_default()),
                "Text" | "Mediumtext" | "Longtext" => "text".to_string(),
                "Binary" | "Varbinary" | "Blob" => "bytes".to_string(),
                "Timestamp" | "Datetime" | "Timestamptz" => "time".to_string(),
                "Date" => "date".to_string(),
                other => format!("schema.rs {other}"),
            };
            tables.entry(table.clone()).or_default().insert(column.to_string(), (nullable, kind));
            max_length = None;
        } else if line == "}" {
            table = None;
        }
    }
    tables
}

#[test]
fn a_declared_table_is_read_with_its_columns_lengths_and_nullability() {
    let text = "diesel::table! {\n    things (id) {\n        id -> Bigint,\n        #[max_length = 40]\n        \
                name -> Varchar,\n        gone_at -> Nullable<Timestamp>,\n    }\n}\n";
    let things = &declared_tables(text)["things"];
    assert_eq!(things["id"], (false, "int64".to_string()));
    assert_eq!(things["name"], (false, "string(40)".to_string()));
    assert_eq!(things["gone_at"], (true, "time".to_string()));
}
