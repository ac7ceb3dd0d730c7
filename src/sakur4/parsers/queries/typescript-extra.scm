; Sakur4's additions for TypeScript and TSX (written for this project, MIT):
; extends/implements clauses as references, and type aliases and enums as
; definitions (tags.scm has interfaces but neither of these).

(extends_clause
  value: [(identifier) @name
          (member_expression property: (property_identifier) @name)]) @reference.class

(implements_clause
  (type_identifier) @name) @reference.implementation

(type_alias_declaration
  name: (type_identifier) @name) @definition.type

(enum_declaration
  name: (identifier) @name) @definition.enum
