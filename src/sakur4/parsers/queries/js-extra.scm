; Sakur4's additions to the JavaScript (and, combined, TypeScript) tags.scm
; (written for this project, MIT like the rest of Sakur4): imported names as
; references. Compiles against both the JavaScript and the TypeScript grammars.

(import_specifier
  name: (identifier) @name) @reference.import

(import_clause
  (identifier) @name) @reference.import
