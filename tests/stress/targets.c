/* Targets of the live-patching stress test: 128 distinct functions, each with a
 * compiler patch site (-fpatchable-function-entry=5), each counting its own body runs
 * and returning a value that proves its arguments arrived intact.
 * Written out in full (not macro-generated) so every symbol is plain in listings. */
#include <stdint.h>

#define STRESS_N 128
uint64_t stress_body_runs[STRESS_N];

#define BODY(i) \
  __atomic_fetch_add(&stress_body_runs[i], 1, __ATOMIC_RELAXED); \
  return x * 3 + y + i;

__attribute__((noinline, used)) uint64_t stress_fn_0(uint64_t x, uint64_t y) { BODY(0) }
__attribute__((noinline, used)) uint64_t stress_fn_1(uint64_t x, uint64_t y) { BODY(1) }
__attribute__((noinline, used)) uint64_t stress_fn_2(uint64_t x, uint64_t y) { BODY(2) }
__attribute__((noinline, used)) uint64_t stress_fn_3(uint64_t x, uint64_t y) { BODY(3) }
__attribute__((noinline, used)) uint64_t stress_fn_4(uint64_t x, uint64_t y) { BODY(4) }
__attribute__((noinline, used)) uint64_t stress_fn_5(uint64_t x, uint64_t y) { BODY(5) }
__attribute__((noinline, used)) uint64_t stress_fn_6(uint64_t x, uint64_t y) { BODY(6) }
__attribute__((noinline, used)) uint64_t stress_fn_7(uint64_t x, uint64_t y) { BODY(7) }
__attribute__((noinline, used)) uint64_t stress_fn_8(uint64_t x, uint64_t y) { BODY(8) }
__attribute__((noinline, used)) uint64_t stress_fn_9(uint64_t x, uint64_t y) { BODY(9) }
__attribute__((noinline, used)) uint64_t stress_fn_10(uint64_t x, uint64_t y) { BODY(10) }
__attribute__((noinline, used)) uint64_t stress_fn_11(uint64_t x, uint64_t y) { BODY(11) }
__attribute__((noinline, used)) uint64_t stress_fn_12(uint64_t x, uint64_t y) { BODY(12) }
__attribute__((noinline, used)) uint64_t stress_fn_13(uint64_t x, uint64_t y) { BODY(13) }
__attribute__((noinline, used)) uint64_t stress_fn_14(uint64_t x, uint64_t y) { BODY(14) }
__attribute__((noinline, used)) uint64_t stress_fn_15(uint64_t x, uint64_t y) { BODY(15) }
__attribute__((noinline, used)) uint64_t stress_fn_16(uint64_t x, uint64_t y) { BODY(16) }
__attribute__((noinline, used)) uint64_t stress_fn_17(uint64_t x, uint64_t y) { BODY(17) }
__attribute__((noinline, used)) uint64_t stress_fn_18(uint64_t x, uint64_t y) { BODY(18) }
__attribute__((noinline, used)) uint64_t stress_fn_19(uint64_t x, uint64_t y) { BODY(19) }
__attribute__((noinline, used)) uint64_t stress_fn_20(uint64_t x, uint64_t y) { BODY(20) }
__attribute__((noinline, used)) uint64_t stress_fn_21(uint64_t x, uint64_t y) { BODY(21) }
__attribute__((noinline, used)) uint64_t stress_fn_22(uint64_t x, uint64_t y) { BODY(22) }
__attribute__((noinline, used)) uint64_t stress_fn_23(uint64_t x, uint64_t y) { BODY(23) }
__attribute__((noinline, used)) uint64_t stress_fn_24(uint64_t x, uint64_t y) { BODY(24) }
__attribute__((noinline, used)) uint64_t stress_fn_25(uint64_t x, uint64_t y) { BODY(25) }
__attribute__((noinline, used)) uint64_t stress_fn_26(uint64_t x, uint64_t y) { BODY(26) }
__attribute__((noinline, used)) uint64_t stress_fn_27(uint64_t x, uint64_t y) { BODY(27) }
__attribute__((noinline, used)) uint64_t stress_fn_28(uint64_t x, uint64_t y) { BODY(28) }
__attribute__((noinline, used)) uint64_t stress_fn_29(uint64_t x, uint64_t y) { BODY(29) }
__attribute__((noinline, used)) uint64_t stress_fn_30(uint64_t x, uint64_t y) { BODY(30) }
__attribute__((noinline, used)) uint64_t stress_fn_31(uint64_t x, uint64_t y) { BODY(31) }
__attribute__((noinline, used)) uint64_t stress_fn_32(uint64_t x, uint64_t y) { BODY(32) }
__attribute__((noinline, used)) uint64_t stress_fn_33(uint64_t x, uint64_t y) { BODY(33) }
__attribute__((noinline, used)) uint64_t stress_fn_34(uint64_t x, uint64_t y) { BODY(34) }
__attribute__((noinline, used)) uint64_t stress_fn_35(uint64_t x, uint64_t y) { BODY(35) }
__attribute__((noinline, used)) uint64_t stress_fn_36(uint64_t x, uint64_t y) { BODY(36) }
__attribute__((noinline, used)) uint64_t stress_fn_37(uint64_t x, uint64_t y) { BODY(37) }
__attribute__((noinline, used)) uint64_t stress_fn_38(uint64_t x, uint64_t y) { BODY(38) }
__attribute__((noinline, used)) uint64_t stress_fn_39(uint64_t x, uint64_t y) { BODY(39) }
__attribute__((noinline, used)) uint64_t stress_fn_40(uint64_t x, uint64_t y) { BODY(40) }
__attribute__((noinline, used)) uint64_t stress_fn_41(uint64_t x, uint64_t y) { BODY(41) }
__attribute__((noinline, used)) uint64_t stress_fn_42(uint64_t x, uint64_t y) { BODY(42) }
__attribute__((noinline, used)) uint64_t stress_fn_43(uint64_t x, uint64_t y) { BODY(43) }
__attribute__((noinline, used)) uint64_t stress_fn_44(uint64_t x, uint64_t y) { BODY(44) }
__attribute__((noinline, used)) uint64_t stress_fn_45(uint64_t x, uint64_t y) { BODY(45) }
__attribute__((noinline, used)) uint64_t stress_fn_46(uint64_t x, uint64_t y) { BODY(46) }
__attribute__((noinline, used)) uint64_t stress_fn_47(uint64_t x, uint64_t y) { BODY(47) }
__attribute__((noinline, used)) uint64_t stress_fn_48(uint64_t x, uint64_t y) { BODY(48) }
__attribute__((noinline, used)) uint64_t stress_fn_49(uint64_t x, uint64_t y) { BODY(49) }
__attribute__((noinline, used)) uint64_t stress_fn_50(uint64_t x, uint64_t y) { BODY(50) }
__attribute__((noinline, used)) uint64_t stress_fn_51(uint64_t x, uint64_t y) { BODY(51) }
__attribute__((noinline, used)) uint64_t stress_fn_52(uint64_t x, uint64_t y) { BODY(52) }
__attribute__((noinline, used)) uint64_t stress_fn_53(uint64_t x, uint64_t y) { BODY(53) }
__attribute__((noinline, used)) uint64_t stress_fn_54(uint64_t x, uint64_t y) { BODY(54) }
__attribute__((noinline, used)) uint64_t stress_fn_55(uint64_t x, uint64_t y) { BODY(55) }
__attribute__((noinline, used)) uint64_t stress_fn_56(uint64_t x, uint64_t y) { BODY(56) }
__attribute__((noinline, used)) uint64_t stress_fn_57(uint64_t x, uint64_t y) { BODY(57) }
__attribute__((noinline, used)) uint64_t stress_fn_58(uint64_t x, uint64_t y) { BODY(58) }
__attribute__((noinline, used)) uint64_t stress_fn_59(uint64_t x, uint64_t y) { BODY(59) }
__attribute__((noinline, used)) uint64_t stress_fn_60(uint64_t x, uint64_t y) { BODY(60) }
__attribute__((noinline, used)) uint64_t stress_fn_61(uint64_t x, uint64_t y) { BODY(61) }
__attribute__((noinline, used)) uint64_t stress_fn_62(uint64_t x, uint64_t y) { BODY(62) }
__attribute__((noinline, used)) uint64_t stress_fn_63(uint64_t x, uint64_t y) { BODY(63) }
__attribute__((noinline, used)) uint64_t stress_fn_64(uint64_t x, uint64_t y) { BODY(64) }
__attribute__((noinline, used)) uint64_t stress_fn_65(uint64_t x, uint64_t y) { BODY(65) }
__attribute__((noinline, used)) uint64_t stress_fn_66(uint64_t x, uint64_t y) { BODY(66) }
__attribute__((noinline, used)) uint64_t stress_fn_67(uint64_t x, uint64_t y) { BODY(67) }
__attribute__((noinline, used)) uint64_t stress_fn_68(uint64_t x, uint64_t y) { BODY(68) }
__attribute__((noinline, used)) uint64_t stress_fn_69(uint64_t x, uint64_t y) { BODY(69) }
__attribute__((noinline, used)) uint64_t stress_fn_70(uint64_t x, uint64_t y) { BODY(70) }
__attribute__((noinline, used)) uint64_t stress_fn_71(uint64_t x, uint64_t y) { BODY(71) }
__attribute__((noinline, used)) uint64_t stress_fn_72(uint64_t x, uint64_t y) { BODY(72) }
__attribute__((noinline, used)) uint64_t stress_fn_73(uint64_t x, uint64_t y) { BODY(73) }
__attribute__((noinline, used)) uint64_t stress_fn_74(uint64_t x, uint64_t y) { BODY(74) }
__attribute__((noinline, used)) uint64_t stress_fn_75(uint64_t x, uint64_t y) { BODY(75) }
__attribute__((noinline, used)) uint64_t stress_fn_76(uint64_t x, uint64_t y) { BODY(76) }
__attribute__((noinline, used)) uint64_t stress_fn_77(uint64_t x, uint64_t y) { BODY(77) }
__attribute__((noinline, used)) uint64_t stress_fn_78(uint64_t x, uint64_t y) { BODY(78) }
__attribute__((noinline, used)) uint64_t stress_fn_79(uint64_t x, uint64_t y) { BODY(79) }
__attribute__((noinline, used)) uint64_t stress_fn_80(uint64_t x, uint64_t y) { BODY(80) }
__attribute__((noinline, used)) uint64_t stress_fn_81(uint64_t x, uint64_t y) { BODY(81) }
__attribute__((noinline, used)) uint64_t stress_fn_82(uint64_t x, uint64_t y) { BODY(82) }
__attribute__((noinline, used)) uint64_t stress_fn_83(uint64_t x, uint64_t y) { BODY(83) }
__attribute__((noinline, used)) uint64_t stress_fn_84(uint64_t x, uint64_t y) { BODY(84) }
__attribute__((noinline, used)) uint64_t stress_fn_85(uint64_t x, uint64_t y) { BODY(85) }
__attribute__((noinline, used)) uint64_t stress_fn_86(uint64_t x, uint64_t y) { BODY(86) }
__attribute__((noinline, used)) uint64_t stress_fn_87(uint64_t x, uint64_t y) { BODY(87) }
__attribute__((noinline, used)) uint64_t stress_fn_88(uint64_t x, uint64_t y) { BODY(88) }
__attribute__((noinline, used)) uint64_t stress_fn_89(uint64_t x, uint64_t y) { BODY(89) }
__attribute__((noinline, used)) uint64_t stress_fn_90(uint64_t x, uint64_t y) { BODY(90) }
__attribute__((noinline, used)) uint64_t stress_fn_91(uint64_t x, uint64_t y) { BODY(91) }
__attribute__((noinline, used)) uint64_t stress_fn_92(uint64_t x, uint64_t y) { BODY(92) }
__attribute__((noinline, used)) uint64_t stress_fn_93(uint64_t x, uint64_t y) { BODY(93) }
__attribute__((noinline, used)) uint64_t stress_fn_94(uint64_t x, uint64_t y) { BODY(94) }
__attribute__((noinline, used)) uint64_t stress_fn_95(uint64_t x, uint64_t y) { BODY(95) }
__attribute__((noinline, used)) uint64_t stress_fn_96(uint64_t x, uint64_t y) { BODY(96) }
__attribute__((noinline, used)) uint64_t stress_fn_97(uint64_t x, uint64_t y) { BODY(97) }
__attribute__((noinline, used)) uint64_t stress_fn_98(uint64_t x, uint64_t y) { BODY(98) }
__attribute__((noinline, used)) uint64_t stress_fn_99(uint64_t x, uint64_t y) { BODY(99) }
__attribute__((noinline, used)) uint64_t stress_fn_100(uint64_t x, uint64_t y) { BODY(100) }
__attribute__((noinline, used)) uint64_t stress_fn_101(uint64_t x, uint64_t y) { BODY(101) }
__attribute__((noinline, used)) uint64_t stress_fn_102(uint64_t x, uint64_t y) { BODY(102) }
__attribute__((noinline, used)) uint64_t stress_fn_103(uint64_t x, uint64_t y) { BODY(103) }
__attribute__((noinline, used)) uint64_t stress_fn_104(uint64_t x, uint64_t y) { BODY(104) }
__attribute__((noinline, used)) uint64_t stress_fn_105(uint64_t x, uint64_t y) { BODY(105) }
__attribute__((noinline, used)) uint64_t stress_fn_106(uint64_t x, uint64_t y) { BODY(106) }
__attribute__((noinline, used)) uint64_t stress_fn_107(uint64_t x, uint64_t y) { BODY(107) }
__attribute__((noinline, used)) uint64_t stress_fn_108(uint64_t x, uint64_t y) { BODY(108) }
__attribute__((noinline, used)) uint64_t stress_fn_109(uint64_t x, uint64_t y) { BODY(109) }
__attribute__((noinline, used)) uint64_t stress_fn_110(uint64_t x, uint64_t y) { BODY(110) }
__attribute__((noinline, used)) uint64_t stress_fn_111(uint64_t x, uint64_t y) { BODY(111) }
__attribute__((noinline, used)) uint64_t stress_fn_112(uint64_t x, uint64_t y) { BODY(112) }
__attribute__((noinline, used)) uint64_t stress_fn_113(uint64_t x, uint64_t y) { BODY(113) }
__attribute__((noinline, used)) uint64_t stress_fn_114(uint64_t x, uint64_t y) { BODY(114) }
__attribute__((noinline, used)) uint64_t stress_fn_115(uint64_t x, uint64_t y) { BODY(115) }
__attribute__((noinline, used)) uint64_t stress_fn_116(uint64_t x, uint64_t y) { BODY(116) }
__attribute__((noinline, used)) uint64_t stress_fn_117(uint64_t x, uint64_t y) { BODY(117) }
__attribute__((noinline, used)) uint64_t stress_fn_118(uint64_t x, uint64_t y) { BODY(118) }
__attribute__((noinline, used)) uint64_t stress_fn_119(uint64_t x, uint64_t y) { BODY(119) }
__attribute__((noinline, used)) uint64_t stress_fn_120(uint64_t x, uint64_t y) { BODY(120) }
__attribute__((noinline, used)) uint64_t stress_fn_121(uint64_t x, uint64_t y) { BODY(121) }
__attribute__((noinline, used)) uint64_t stress_fn_122(uint64_t x, uint64_t y) { BODY(122) }
__attribute__((noinline, used)) uint64_t stress_fn_123(uint64_t x, uint64_t y) { BODY(123) }
__attribute__((noinline, used)) uint64_t stress_fn_124(uint64_t x, uint64_t y) { BODY(124) }
__attribute__((noinline, used)) uint64_t stress_fn_125(uint64_t x, uint64_t y) { BODY(125) }
__attribute__((noinline, used)) uint64_t stress_fn_126(uint64_t x, uint64_t y) { BODY(126) }
__attribute__((noinline, used)) uint64_t stress_fn_127(uint64_t x, uint64_t y) { BODY(127) }

typedef uint64_t (*stress_fn)(uint64_t, uint64_t);
stress_fn stress_fns[STRESS_N] = {
  stress_fn_0, stress_fn_1, stress_fn_2, stress_fn_3, stress_fn_4, stress_fn_5, stress_fn_6, stress_fn_7,
  stress_fn_8, stress_fn_9, stress_fn_10, stress_fn_11, stress_fn_12, stress_fn_13, stress_fn_14, stress_fn_15,
  stress_fn_16, stress_fn_17, stress_fn_18, stress_fn_19, stress_fn_20, stress_fn_21, stress_fn_22, stress_fn_23,
  stress_fn_24, stress_fn_25, stress_fn_26, stress_fn_27, stress_fn_28, stress_fn_29, stress_fn_30, stress_fn_31,
  stress_fn_32, stress_fn_33, stress_fn_34, stress_fn_35, stress_fn_36, stress_fn_37, stress_fn_38, stress_fn_39,
  stress_fn_40, stress_fn_41, stress_fn_42, stress_fn_43, stress_fn_44, stress_fn_45, stress_fn_46, stress_fn_47,
  stress_fn_48, stress_fn_49, stress_fn_50, stress_fn_51, stress_fn_52, stress_fn_53, stress_fn_54, stress_fn_55,
  stress_fn_56, stress_fn_57, stress_fn_58, stress_fn_59, stress_fn_60, stress_fn_61, stress_fn_62, stress_fn_63,
  stress_fn_64, stress_fn_65, stress_fn_66, stress_fn_67, stress_fn_68, stress_fn_69, stress_fn_70, stress_fn_71,
  stress_fn_72, stress_fn_73, stress_fn_74, stress_fn_75, stress_fn_76, stress_fn_77, stress_fn_78, stress_fn_79,
  stress_fn_80, stress_fn_81, stress_fn_82, stress_fn_83, stress_fn_84, stress_fn_85, stress_fn_86, stress_fn_87,
  stress_fn_88, stress_fn_89, stress_fn_90, stress_fn_91, stress_fn_92, stress_fn_93, stress_fn_94, stress_fn_95,
  stress_fn_96, stress_fn_97, stress_fn_98, stress_fn_99, stress_fn_100, stress_fn_101, stress_fn_102, stress_fn_103,
  stress_fn_104, stress_fn_105, stress_fn_106, stress_fn_107, stress_fn_108, stress_fn_109, stress_fn_110, stress_fn_111,
  stress_fn_112, stress_fn_113, stress_fn_114, stress_fn_115, stress_fn_116, stress_fn_117, stress_fn_118, stress_fn_119,
  stress_fn_120, stress_fn_121, stress_fn_122, stress_fn_123, stress_fn_124, stress_fn_125, stress_fn_126, stress_fn_127,
};
