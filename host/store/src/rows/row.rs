//! [`row!`]: a row type's `sqlx::FromRow`, written by the store itself.

/// Declares a row struct that decodes from either backend's rows
/// (`sqlx::FromRow`): each field reads the column of its own name, with
/// the field's type. It is what `#[derive(sqlx::FromRow)]` makes of a
/// struct without attributes, without sqlx's proc macros, which build sqlx
/// a second time (its bundled SQLite included) to run in the compiler. A
/// column read under another name is renamed in the statement (`AS`).
macro_rules! row {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $($(#[$field_meta:meta])* $field_vis:vis $field:ident: $ty:ty),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $name {
            $($(#[$field_meta])* $field_vis $field: $ty),*
        }

        impl<'r, R: ::sqlx::Row> ::sqlx::FromRow<'r, R> for $name
        where
            &'r str: ::sqlx::ColumnIndex<R>,
            $($ty: ::sqlx::Decode<'r, R::Database> + ::sqlx::Type<R::Database>,)*
        {
            fn from_row(row: &'r R) -> ::sqlx::Result<Self> {
                Ok($name {
                    $($field: ::sqlx::Row::try_get(row, stringify!($field))?),*
                })
            }
        }
    };
}
pub(crate) use row;
