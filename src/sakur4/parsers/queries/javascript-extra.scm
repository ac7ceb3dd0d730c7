; Sakur4's addition for JavaScript only (written for this project, MIT): the
; class a class extends is a reference. TypeScript's tree differs (see
; typescript-extra.scm).

(class_heritage
  [(identifier) @name
   (member_expression property: (property_identifier) @name)]) @reference.class
