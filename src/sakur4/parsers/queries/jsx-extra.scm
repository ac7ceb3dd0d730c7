; Sakur4's addition for JSX in JavaScript and TSX (written for this project,
; MIT): rendering a component (<Button />) is a reference to it. Lower-case
; names are HTML elements, not components.

(jsx_opening_element
  name: (identifier) @name
  (#match? @name "^[A-Z]")) @reference.call

(jsx_self_closing_element
  name: (identifier) @name
  (#match? @name "^[A-Z]")) @reference.call
