; Sakur4's additions to tree-sitter-rust's tags.scm (written for this project,
; MIT): an impl block is the scope of its methods, so `impl Stack { fn push }`
; gives `module.Stack.push`; `use` declarations are references.

(impl_item
  type: [(type_identifier) @name
         (generic_type type: (type_identifier) @name)
         (scoped_type_identifier name: (type_identifier) @name)]) @scope

(use_declaration
  argument: (scoped_identifier name: (identifier) @name)) @reference.import

(use_declaration
  argument: (identifier) @name) @reference.import

(use_list
  (identifier) @name) @reference.import

(use_list
  (scoped_identifier name: (identifier) @name)) @reference.import

(use_as_clause
  path: (scoped_identifier name: (identifier) @name)) @reference.import

; `Stack::new()`: tags.scm has plain and method calls, not path calls.
(call_expression
  function: (scoped_identifier name: (identifier) @name)) @reference.call
