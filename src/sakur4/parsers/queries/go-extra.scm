; Sakur4's additions to tree-sitter-go's tags.scm (written for this project,
; MIT): a method's receiver type is its scope, so `func (s *Server) Serve()`
; is qualified `module.Server.Serve`; imports are references.

(method_declaration
  receiver: (parameter_list
    (parameter_declaration
      type: [(type_identifier) @name
             (pointer_type (type_identifier) @name)
             (generic_type type: (type_identifier) @name)
             (pointer_type (generic_type type: (type_identifier) @name))]))) @scope

(import_spec
  path: (interpreted_string_literal) @name) @reference.import
