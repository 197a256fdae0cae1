//! The `#[lambda]` attribute of `waft-sdk`.
//!
//! It keeps the user's function as written and adds the component export
//! that calls it, so lambda code never touches wit-bindgen. Signature errors
//! are reported on the user's own tokens.

use proc_macro::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, ReturnType, parse_macro_input};

/// See `waft_sdk::lambda`.
#[proc_macro_attribute]
pub fn lambda(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        let attr = proc_macro2::TokenStream::from(attr);
        return syn::Error::new(attr.span(), "#[lambda] takes no arguments")
            .to_compile_error()
            .into();
    }
    let function = parse_macro_input!(item as ItemFn);
    match expand(&function) {
        Ok(tokens) => tokens.into(),
        Err(error) => {
            let mut tokens = error.to_compile_error();
            tokens.extend(quote!(#function));
            tokens.into()
        }
    }
}

fn expand(function: &ItemFn) -> syn::Result<proc_macro2::TokenStream> {
    let signature = &function.sig;
    if let Some(asyncness) = &signature.asyncness {
        return Err(syn::Error::new(
            asyncness.span(),
            "a lambda handler cannot be `async`: write a plain `fn(Task) -> Outcome`",
        ));
    }
    if !signature.generics.params.is_empty() {
        return Err(syn::Error::new(
            signature.generics.span(),
            "a lambda handler cannot be generic",
        ));
    }
    if signature.inputs.len() != 1 {
        // Point at the arguments, or at the empty parentheses.
        let span = if signature.inputs.is_empty() {
            signature.paren_token.span.join()
        } else {
            signature.inputs.span()
        };
        return Err(syn::Error::new(
            span,
            format!(
                "a lambda handler takes exactly one argument, `task: waft_sdk::Task`; found {}",
                signature.inputs.len()
            ),
        ));
    }
    if let Some(FnArg::Receiver(receiver)) = signature.inputs.first() {
        return Err(syn::Error::new(
            receiver.span(),
            "a lambda handler is a free function, not a method",
        ));
    }
    if let ReturnType::Default = signature.output {
        return Err(syn::Error::new(
            signature.ident.span(),
            "a lambda handler returns its outcome: add `-> waft_sdk::Outcome` \
             (or `-> Result<(), waft_sdk::Error>`)",
        ));
    }

    let name = &signature.ident;
    // Spanned on the user's signature, so a wrong argument or return type is
    // reported there rather than inside generated code.
    let bind_handler = quote_spanned! {signature.span()=>
        let handler: fn(::waft_sdk::Task) -> _ = #name;
    };
    let return_span = match &signature.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => signature.ident.span(),
    };
    let call_handler = quote_spanned! {return_span=>
        ::waft_sdk::__private::run(task, handler)
    };
    Ok(quote! {
        #function

        const _: () = {
            struct WaftLambda;

            impl ::waft_sdk::__private::Guest for WaftLambda {
                fn handle(
                    task: ::waft_sdk::__private::RawTask,
                ) -> ::waft_sdk::__private::RawOutcome {
                    #bind_handler
                    #call_handler
                }
            }

            ::waft_sdk::__private::bindings::export!(WaftLambda);
        };
    })
}
