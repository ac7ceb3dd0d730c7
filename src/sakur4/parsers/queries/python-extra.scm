; Sakur4's additions to tree-sitter-python's tags.scm (written for this project,
; MIT like the rest of Sakur4): imports and base classes as references, so a
; module that imports or subclasses a symbol shows up in its impact.

(import_statement
  name: (dotted_name (identifier) @name .)) @reference.import

(import_statement
  name: (aliased_import name: (dotted_name (identifier) @name .))) @reference.import

(import_from_statement
  name: (dotted_name (identifier) @name .)) @reference.import

(import_from_statement
  name: (aliased_import name: (dotted_name (identifier) @name .))) @reference.import

(class_definition
  superclasses: (argument_list
    [(identifier) @name
     (attribute attribute: (identifier) @name)])) @reference.class
