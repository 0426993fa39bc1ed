//! AML byte values, named as the ACPI specification's "AML Byte Stream Byte
//! Values" table names them (`ZeroOp` is `ZERO_OP`). An extended opcode is
//! two bytes, [`EXT_OP_PREFIX`] then the value named here (`DeviceOp` is
//! `0x5B 0x82`: `DEVICE_OP` is `0x82`).

// Data objects and name strings.
pub(super) const ZERO_OP: u8 = 0x00;
pub(super) const ONE_OP: u8 = 0x01;
pub(super) const ALIAS_OP: u8 = 0x06;
pub(super) const NAME_OP: u8 = 0x08;
pub(super) const BYTE_PREFIX: u8 = 0x0A;
pub(super) const WORD_PREFIX: u8 = 0x0B;
pub(super) const DWORD_PREFIX: u8 = 0x0C;
pub(super) const STRING_PREFIX: u8 = 0x0D;
pub(super) const QWORD_PREFIX: u8 = 0x0E;
pub(super) const SCOPE_OP: u8 = 0x10;
pub(super) const BUFFER_OP: u8 = 0x11;
pub(super) const PACKAGE_OP: u8 = 0x12;
pub(super) const VAR_PACKAGE_OP: u8 = 0x13;
pub(super) const METHOD_OP: u8 = 0x14;
pub(super) const EXTERNAL_OP: u8 = 0x15;
/// A NameString with no segments.
pub(super) const NULL_NAME: u8 = 0x00;
pub(super) const DUAL_NAME_PREFIX: u8 = 0x2E;
pub(super) const MULTI_NAME_PREFIX: u8 = 0x2F;
pub(super) const EXT_OP_PREFIX: u8 = 0x5B;
pub(super) const ROOT_CHAR: u8 = b'\\';
pub(super) const PARENT_PREFIX_CHAR: u8 = b'^';
pub(super) const LOCAL0_OP: u8 = 0x60;
pub(super) const LOCAL7_OP: u8 = 0x67;
pub(super) const ARG0_OP: u8 = 0x68;
pub(super) const ARG6_OP: u8 = 0x6E;

// Expressions.
pub(super) const STORE_OP: u8 = 0x70;
pub(super) const REF_OF_OP: u8 = 0x71;
pub(super) const ADD_OP: u8 = 0x72;
pub(super) const CONCAT_OP: u8 = 0x73;
pub(super) const SUBTRACT_OP: u8 = 0x74;
pub(super) const INCREMENT_OP: u8 = 0x75;
pub(super) const DECREMENT_OP: u8 = 0x76;
pub(super) const MULTIPLY_OP: u8 = 0x77;
pub(super) const DIVIDE_OP: u8 = 0x78;
pub(super) const SHIFT_LEFT_OP: u8 = 0x79;
pub(super) const SHIFT_RIGHT_OP: u8 = 0x7A;
pub(super) const AND_OP: u8 = 0x7B;
pub(super) const NAND_OP: u8 = 0x7C;
pub(super) const OR_OP: u8 = 0x7D;
pub(super) const NOR_OP: u8 = 0x7E;
pub(super) const XOR_OP: u8 = 0x7F;
pub(super) const NOT_OP: u8 = 0x80;
pub(super) const FIND_SET_LEFT_BIT_OP: u8 = 0x81;
pub(super) const FIND_SET_RIGHT_BIT_OP: u8 = 0x82;
pub(super) const DEREF_OF_OP: u8 = 0x83;
pub(super) const CONCAT_RES_OP: u8 = 0x84;
pub(super) const MOD_OP: u8 = 0x85;
pub(super) const NOTIFY_OP: u8 = 0x86;
pub(super) const SIZE_OF_OP: u8 = 0x87;
pub(super) const INDEX_OP: u8 = 0x88;
pub(super) const MATCH_OP: u8 = 0x89;
pub(super) const CREATE_DWORD_FIELD_OP: u8 = 0x8A;
pub(super) const CREATE_WORD_FIELD_OP: u8 = 0x8B;
pub(super) const CREATE_BYTE_FIELD_OP: u8 = 0x8C;
pub(super) const CREATE_BIT_FIELD_OP: u8 = 0x8D;
pub(super) const OBJECT_TYPE_OP: u8 = 0x8E;
pub(super) const CREATE_QWORD_FIELD_OP: u8 = 0x8F;
pub(super) const LAND_OP: u8 = 0x90;
pub(super) const LOR_OP: u8 = 0x91;
pub(super) const LNOT_OP: u8 = 0x92;
pub(super) const LEQUAL_OP: u8 = 0x93;
pub(super) const LGREATER_OP: u8 = 0x94;
pub(super) const LLESS_OP: u8 = 0x95;
pub(super) const TO_BUFFER_OP: u8 = 0x96;
pub(super) const TO_DECIMAL_STRING_OP: u8 = 0x97;
pub(super) const TO_HEX_STRING_OP: u8 = 0x98;
pub(super) const TO_INTEGER_OP: u8 = 0x99;
pub(super) const TO_STRING_OP: u8 = 0x9C;
pub(super) const COPY_OBJECT_OP: u8 = 0x9D;
pub(super) const MID_OP: u8 = 0x9E;
pub(super) const ONES_OP: u8 = 0xFF;

// Statements.
pub(super) const CONTINUE_OP: u8 = 0x9F;
pub(super) const IF_OP: u8 = 0xA0;
pub(super) const ELSE_OP: u8 = 0xA1;
pub(super) const WHILE_OP: u8 = 0xA2;
pub(super) const NOOP_OP: u8 = 0xA3;
pub(super) const RETURN_OP: u8 = 0xA4;
pub(super) const BREAK_OP: u8 = 0xA5;
pub(super) const BREAK_POINT_OP: u8 = 0xCC;

// Extended opcodes: the byte after EXT_OP_PREFIX.
pub(super) const MUTEX_OP: u8 = 0x01;
pub(super) const EVENT_OP: u8 = 0x02;
pub(super) const COND_REF_OF_OP: u8 = 0x12;
pub(super) const CREATE_FIELD_OP: u8 = 0x13;
pub(super) const LOAD_TABLE_OP: u8 = 0x1F;
pub(super) const LOAD_OP: u8 = 0x20;
pub(super) const STALL_OP: u8 = 0x21;
pub(super) const SLEEP_OP: u8 = 0x22;
pub(super) const ACQUIRE_OP: u8 = 0x23;
pub(super) const SIGNAL_OP: u8 = 0x24;
pub(super) const WAIT_OP: u8 = 0x25;
pub(super) const RESET_OP: u8 = 0x26;
pub(super) const RELEASE_OP: u8 = 0x27;
pub(super) const FROM_BCD_OP: u8 = 0x28;
pub(super) const TO_BCD_OP: u8 = 0x29;
pub(super) const REVISION_OP: u8 = 0x30;
pub(super) const DEBUG_OP: u8 = 0x31;
pub(super) const FATAL_OP: u8 = 0x32;
pub(super) const TIMER_OP: u8 = 0x33;
pub(super) const OP_REGION_OP: u8 = 0x80;
pub(super) const FIELD_OP: u8 = 0x81;
pub(super) const DEVICE_OP: u8 = 0x82;
pub(super) const PROCESSOR_OP: u8 = 0x83;
pub(super) const POWER_RES_OP: u8 = 0x84;
pub(super) const THERMAL_ZONE_OP: u8 = 0x85;
pub(super) const INDEX_FIELD_OP: u8 = 0x86;
pub(super) const BANK_FIELD_OP: u8 = 0x87;
pub(super) const DATA_REGION_OP: u8 = 0x88;

// The first byte of an entry in a field list (FieldElement).
pub(super) const RESERVED_FIELD: u8 = 0x00;
pub(super) const ACCESS_FIELD: u8 = 0x01;
pub(super) const CONNECT_FIELD: u8 = 0x02;
pub(super) const EXTENDED_ACCESS_FIELD: u8 = 0x03;

// Match's comparisons (MatchOpcode); MGT is 5.
pub(super) const MTR: u8 = 0;
pub(super) const MEQ: u8 = 1;
pub(super) const MLE: u8 = 2;
pub(super) const MLT: u8 = 3;
pub(super) const MGE: u8 = 4;
